"""The cluster-api rung annotates the Machine whose status.nodeRef is this Node, and no
other: a Node's own annotations (which its kubelet may write) name nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.remediators import RemediationError
from pitcrew.remediators.clusterapi import ClusterApi
from support.remediation_requests import reboot_request

SPEC = GPUHealthPolicySpec.model_validate({"nodeSelector": {"matchLabels": {"a": "b"}}})
NODE_UID = "0f7e9a52-6d3c-4c8e-9d3f-0a1b2c3d4e5f"
PROVIDER = "aws:///us-east-1a/i-0abc"
NODE = {
    "metadata": {
        "name": "gpu-7",
        "uid": NODE_UID,
        # What root on gpu-7 wrote: the control-plane Machine.
        "annotations": {
            "cluster.x-k8s.io/machine": "cp-0",
            "cluster.x-k8s.io/cluster-namespace": "capi",
        },
    },
    "spec": {"providerID": PROVIDER},
}


def machine(name: str, *, node: str, uid: str | None = None, provider: str = "") -> dict[str, Any]:
    ref = {"name": node, **({"uid": uid, "kind": "Node", "apiVersion": "v1"} if uid else {})}
    return {
        "metadata": {"name": name, "namespace": "capi"},
        "spec": {"providerID": provider} if provider else {},
        "status": {"nodeRef": ref},
    }


CONTROL_PLANE = machine("cp-0", node="cp-node-0", uid="9d1c", provider="aws:///i-cp")


class Custom:
    """CustomObjectsApi serving ``machines`` at ``served`` versions."""

    def __init__(self, items: list[dict[str, Any]], *, served: tuple[str, ...] = ("v1beta1",)):
        self.items, self.served = items, served
        self.patched: list[tuple[str, str, str]] = []
        self.listed: list[str] = []
        self.status = 0

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> dict[str, Any]:
        self.listed.append(version)
        if self.status:
            raise client.ApiException(status=self.status, reason="Forbidden")
        if version not in self.served:
            raise client.ApiException(status=404, reason="Not Found")
        return {"items": self.items}

    def patch_namespaced_custom_object(self, *args: Any, **_: Any) -> None:
        _group, version, namespace, _plural, name, _body = args
        self.patched.append((version, namespace, name))


def start(monkeypatch: pytest.MonkeyPatch, custom: Custom, node: dict[str, Any] = NODE) -> str:
    monkeypatch.setattr(client, "CustomObjectsApi", lambda api: custom)
    request = replace(reboot_request(SPEC, node="gpu-7"), node_object=node, action="cluster-api")
    return ClusterApi(api=None).start(request)  # type: ignore[arg-type]


def test_the_machine_whose_node_ref_is_this_node_is_annotated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    custom = Custom([CONTROL_PLANE, machine("md-0-abc", node="gpu-7", uid=NODE_UID)])
    said = start(monkeypatch, custom)
    assert custom.patched == [("v1beta1", "capi", "md-0-abc")]
    assert "capi/md-0-abc" in said


def test_a_node_naming_another_machine_gets_nothing_annotated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    custom = Custom([CONTROL_PLANE])
    with pytest.raises(RemediationError, match=r"not trusted.*no Machine was annotated") as refused:
        start(monkeypatch, custom)
    assert "cp-0" in str(refused.value)
    assert custom.patched == []


def test_a_machine_of_an_earlier_node_of_the_same_name_is_not_this_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    custom = Custom([machine("md-0-old", node="gpu-7", uid="an-earlier-node")])
    with pytest.raises(RemediationError, match="no Cluster API Machine"):
        start(monkeypatch, custom)
    assert custom.patched == []


def test_a_name_only_node_ref_is_bound_by_provider_id(monkeypatch: pytest.MonkeyPatch) -> None:
    # v1beta2 (Cluster API 1.11+) keeps the node's name only.
    stale = machine("md-0-old", node="gpu-7", provider="aws:///us-east-1a/i-0old")
    unbound = machine("md-0-none", node="gpu-7")
    custom = Custom([stale, unbound, machine("md-0-new", node="gpu-7", provider=PROVIDER)])
    custom.served = ("v1beta2", "v1beta1")
    start(monkeypatch, custom)
    assert custom.patched == [("v1beta2", "capi", "md-0-new")]


def test_two_machines_claiming_the_node_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    twins = [machine(n, node="gpu-7", uid=NODE_UID) for n in ("md-a", "md-b")]
    custom = Custom(twins)
    with pytest.raises(RemediationError, match="capi/md-a, capi/md-b all name node gpu-7"):
        start(monkeypatch, custom)
    assert custom.patched == []


def test_an_api_no_longer_served_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    custom = Custom([], served=())
    with pytest.raises(RemediationError, match=r"serves no Cluster API Machines.*self-hosted"):
        start(monkeypatch, custom)
    assert custom.listed == ["v1beta2", "v1beta1"]


def test_a_forbidden_list_says_what_to_grant(monkeypatch: pytest.MonkeyPatch) -> None:
    custom = Custom([])
    custom.status = 403
    with pytest.raises(RemediationError, match=r"grant list on machines\.cluster\.x-k8s\.io"):
        start(monkeypatch, custom)
