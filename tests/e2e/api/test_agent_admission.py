"""The admission policy: a node agent or a probe pod may write only its own node's GPUNode.

Their tokens are bound to a pod on one node, as the projected token in the
DaemonSet's or the probe Job's pod is; the apiserver adds that node's name to the
request and the ValidatingAdmissionPolicy compares it with the GPUNode being
written. Root on a GPU node can read either token: these tests play that tenant.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pitcrew.api.vocabulary import AGENT_MANAGER, PROBE_MANAGER
from pitcrew.dev.devcluster import install
from pitcrew.dev.devcluster.nodes import node_name
from pitcrew.kube import gpunodes
from pitcrew.kube.client import api_client

NAMESPACE = "pitcrew-system"
REPORT = {"lastHeartbeat": "2026-12-01T12:00:00Z"}


def pod_on_node_0(
    api: client.ApiClient, core: client.CoreV1Api, component: str
) -> Iterator[dict[str, Any]]:
    install.install(api, namespace=NAMESPACE)
    for index in (0, 1):
        node = core.read_node(node_name(index))
        gpunodes.ensure(api, node=node.metadata.name, node_uid=node.metadata.uid)
    name = f"{component}-{uuid.uuid4().hex[:6]}"
    pod = core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node_name(0),
                "serviceAccountName": f"pitcrew-{component}",
                "containers": [{"name": component, "image": "pitcrew:test"}],
            },
        },
    )
    yield {"metadata": {"name": name, "uid": pod.metadata.uid}}
    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


@pytest.fixture
def agent_pod(api_client: client.ApiClient, core: client.CoreV1Api) -> Iterator[dict[str, Any]]:
    yield from pod_on_node_0(api_client, core, "agent")


@pytest.fixture
def probe_pod(api_client: client.ApiClient, core: client.CoreV1Api) -> Iterator[dict[str, Any]]:
    yield from pod_on_node_0(api_client, core, "probe")


def agent(
    api: client.ApiClient, path: Path, pod: dict[str, Any] | None, component: str = "agent"
) -> client.ApiClient:
    kubeconfig = install.service_account_kubeconfig(
        api, component=component, namespace=NAMESPACE, path=path, bound_pod=pod
    )
    return api_client(str(kubeconfig))


def write(api: client.ApiClient, node: str, manager: str = AGENT_MANAGER) -> None:
    gpunodes.apply_status(api, node=node, status=REPORT, manager=manager)


def test_an_agent_writes_its_own_gpunode_and_is_refused_for_another(
    api_client: client.ApiClient,
    agent_pod: dict[str, Any],
    tmp_path: Path,
) -> None:
    own = agent(api_client, tmp_path / "agent.kubeconfig", agent_pod)
    write(own, node_name(0))
    with pytest.raises(client.ApiException) as refused:
        write(own, node_name(1))
    assert refused.value.status == 403
    assert (
        f"the Pitcrew agent of node {node_name(0)} may write only its own GPUNode, "
        f"not {node_name(1)}" in str(refused.value.body)
    )


def test_an_agent_token_not_bound_to_a_pod_is_refused(
    api_client: client.ApiClient,
    agent_pod: dict[str, Any],
    tmp_path: Path,
) -> None:
    unbound = agent(api_client, tmp_path / "unbound.kubeconfig", None)
    with pytest.raises(client.ApiException) as refused:
        write(unbound, node_name(0))
    assert refused.value.status == 403
    assert "must use a token bound to its pod" in str(refused.value.body)


def test_a_probe_pod_reports_for_its_own_node_and_is_refused_for_another(
    api_client: client.ApiClient,
    probe_pod: dict[str, Any],
    tmp_path: Path,
) -> None:
    # A tenant with root on a node under validation reads the probe pod's token and
    # tries to fail another node's probe: refused, whatever the report says.
    own = agent(api_client, tmp_path / "probe.kubeconfig", probe_pod, "probe")
    write(own, node_name(0), PROBE_MANAGER)
    with pytest.raises(client.ApiException) as refused:
        write(own, node_name(1), PROBE_MANAGER)
    assert refused.value.status == 403
    assert (
        f"the Pitcrew probe pod of node {node_name(0)} may write only its own GPUNode, "
        f"not {node_name(1)}" in str(refused.value.body)
    )
    unbound = agent(api_client, tmp_path / "unbound-probe.kubeconfig", None, "probe")
    with pytest.raises(client.ApiException) as refused:
        write(unbound, node_name(1), PROBE_MANAGER)
    assert "the Pitcrew probe pod must use a token bound to its pod" in str(refused.value.body)
