"""The admission policy: a node agent may write only its own node's GPUNode.

The agent's token is bound to a pod on one node, as the projected token in
the DaemonSet pod is; the apiserver adds that node's name to the request and
the ValidatingAdmissionPolicy compares it with the GPUNode being written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pitcrew.api.vocabulary import AGENT_MANAGER
from pitcrew.kube import gpunodes
from pitcrew.kube.client import api_client
from pitcrew.sim.devcluster import install
from pitcrew.sim.devcluster.nodes import node_name

NAMESPACE = "pitcrew-system"
REPORT = {"lastHeartbeat": "2026-12-01T12:00:00Z"}


@pytest.fixture
def agent_pod(api_client: client.ApiClient, core: client.CoreV1Api) -> Iterator[dict[str, Any]]:
    install.install(api_client, namespace=NAMESPACE)
    for index in (0, 1):
        node = core.read_node(node_name(index))
        gpunodes.ensure(api_client, node=node.metadata.name, node_uid=node.metadata.uid)
    name = f"agent-{uuid.uuid4().hex[:6]}"
    pod = core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node_name(0),
                "serviceAccountName": "pitcrew-agent",
                "containers": [{"name": "agent", "image": "pitcrew:test"}],
            },
        },
    )
    yield {"metadata": {"name": name, "uid": pod.metadata.uid}}
    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def agent(api: client.ApiClient, path: Path, pod: dict[str, Any] | None) -> client.ApiClient:
    kubeconfig = install.service_account_kubeconfig(
        api, component="agent", namespace=NAMESPACE, path=path, bound_pod=pod
    )
    return api_client(str(kubeconfig))


def write(api: client.ApiClient, node: str) -> None:
    gpunodes.apply_status(api, node=node, status=REPORT, manager=AGENT_MANAGER)


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
