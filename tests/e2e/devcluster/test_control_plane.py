"""The devcluster is a real control plane: scheduling, eviction, PDBs, RBAC."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client

from pitcrew.dev import devcluster
from pitcrew.dev.devcluster.nodes import node_name
from pitcrew.kube.client import api_client

GPU_LABEL = "nvidia.com/gpu.present"


def eventually(check: Callable[[], bool], *, timeout: float = 30.0, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


def pod_manifest(
    name: str, *, node: str, labels: dict[str, str] | None = None
) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "train",
                    "image": "trainer:latest",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
            "terminationGracePeriodSeconds": 5,
        },
    }


def running(core: client.CoreV1Api, name: str, namespace: str) -> bool:
    return bool(core.read_namespaced_pod(name, namespace).status.phase == "Running")


def gone(core: client.CoreV1Api, name: str, namespace: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except client.ApiException as error:
        return error.status == 404
    return False


def test_gpu_nodes_are_ready_with_eight_gpus(core: client.CoreV1Api) -> None:
    nodes = core.list_node(label_selector=f"{GPU_LABEL}=true").items
    assert len(nodes) >= 4
    for node in nodes:
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True", node.metadata.name


def test_pod_is_scheduled_and_evicted(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("victim", node="gpu-node-0001"))
    eventually(lambda: running(core, "victim", namespace), what="pod Running")
    core.create_namespaced_pod_eviction(
        "victim",
        namespace,
        client.V1Eviction(metadata=client.V1ObjectMeta(name="victim", namespace=namespace)),
    )
    eventually(lambda: gone(core, "victim", namespace), what="evicted pod to disappear")


def ready(core: client.CoreV1Api, name: str, namespace: str) -> bool:
    conditions = core.read_namespaced_pod(name, namespace).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def test_a_pod_marked_not_ready_is_readied_again(core: client.CoreV1Api, namespace: str) -> None:
    """As the node lifecycle controller marks pods when their node misses heartbeats,
    and as a live kubelet then undoes: a budget over the pod must not stay at zero."""
    core.create_namespaced_pod(namespace, pod_manifest("blip", node="gpu-node-0002"))
    eventually(lambda: ready(core, "blip", namespace), what="pod Ready")
    core.patch_namespaced_pod_status(
        "blip",
        namespace,
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
    )
    assert not ready(core, "blip", namespace)
    eventually(lambda: ready(core, "blip", namespace), timeout=60, what="pod Ready again")
    assert running(core, "blip", namespace)


def test_eviction_blocked_by_pdb_returns_429(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    labels = {"job": "protected"}
    core.create_namespaced_pod(
        namespace, pod_manifest("protected", node="gpu-node-0002", labels=labels)
    )
    policy = client.PolicyV1Api(api_client)
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "protected"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
    )
    eventually(lambda: running(core, "protected", namespace), what="pod Running")

    def budget_computed() -> bool:
        status = policy.read_namespaced_pod_disruption_budget("protected", namespace).status
        return bool(status and status.current_healthy == 1 and status.disruptions_allowed == 0)

    eventually(budget_computed, what="the disruption controller to compute the PDB")
    with pytest.raises(client.ApiException) as caught:
        core.create_namespaced_pod_eviction(
            "protected",
            namespace,
            client.V1Eviction(metadata=client.V1ObjectMeta(name="protected", namespace=namespace)),
        )
    assert caught.value.status == 429
    assert "disruption budget" in caught.value.body
    assert running(core, "protected", namespace)


def test_service_account_without_role_is_forbidden(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    configuration = client.Configuration()
    configuration.host = api_client.configuration.host
    configuration.ssl_ca_cert = api_client.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    as_nobody = client.CoreV1Api(client.ApiClient(configuration))
    with pytest.raises(client.ApiException) as caught:
        as_nobody.list_node()
    assert caught.value.status == 403
    assert f"system:serviceaccount:{namespace}:nobody" in caught.value.body


def test_kwok_keeps_conditions_it_does_not_own(core: client.CoreV1Api) -> None:
    """kwok's node status patches are strategic merges keyed by condition type,
    so a GPU health condition set by Pitcrew survives kwok's status updates."""
    name = "gpu-node-condition-probe"
    now = "2026-01-01T00:00:00Z"
    core.create_node(
        {
            "metadata": {"name": name, "labels": {"pitcrew.dev/simulated": "true"}},
            "status": {
                "conditions": [
                    {
                        "type": "GPUHealthy",
                        "status": "False",
                        "reason": "XidFatal",
                        "message": "XID 79 on GPU 3",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ]
            },
        }
    )
    try:

        def initialised() -> bool:
            node = core.read_node(name)
            return any(
                c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
            )

        eventually(initialised, what="kwok to initialise the node")
        conditions = {c.type: c for c in core.read_node(name).status.conditions}
        assert conditions["GPUHealthy"].status == "False"
        assert conditions["GPUHealthy"].reason == "XidFatal"
    finally:
        core.delete_node(name)


def test_a_node_identity_may_change_its_own_node_only(
    kubeconfig: str, core: client.CoreV1Api
) -> None:
    # As strict as kubeadm (Node authorizer, NodeRestriction): root on node 0 holds
    # its kubelet's identity, and it reaches no further than that node.
    own, other = node_name(0), node_name(1)
    path = devcluster.node_kubeconfig(directory=Path(kubeconfig).parent, node=own)
    kubelet = client.CoreV1Api(api_client(str(path)))
    kubelet.patch_node(own, {"metadata": {"annotations": {"example.com/own": "yes"}}})
    assert core.read_node(own).metadata.annotations["example.com/own"] == "yes"
    with pytest.raises(client.ApiException) as refused:
        kubelet.patch_node(other, {"metadata": {"annotations": {"example.com/own": "no"}}})
    assert refused.value.status == 403
    with pytest.raises(client.ApiException) as refused:
        kubelet.patch_node(own, {"metadata": {"labels": {"node-restriction.kubernetes.io/x": "1"}}})
    assert refused.value.status == 403
    core.patch_node(own, {"metadata": {"annotations": {"example.com/own": None}}})
