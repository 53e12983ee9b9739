"""Fake GPU nodes for devcluster: Node objects that kwok keeps alive.

A fake node carries the labels a real GPU node gets from GPU Feature Discovery
(``nvidia.com/gpu.present``, ``nvidia.com/gpu.product``) and the extended
resource ``nvidia.com/gpu`` in capacity and allocatable, so that schedulers,
PodDisruptionBudgets and Pitcrew's selectors treat it exactly like hardware.
``pitcrew.dev/simulated=true`` is what kwok and the simulated agents select on;
Pitcrew's operator never looks at it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from gpuhealth.models import GpuModel
from pitcrew.api.vocabulary import GPU_PRODUCT_LABEL, GPU_RESOURCE, RACK_LABEL, SIMULATED_LABEL
from pitcrew.kube.client import list_all

NODES_PER_RACK = 8
CREATE_PARALLELISM = 16


def node_name(index: int) -> str:
    return f"gpu-node-{index:04d}"


def gpu_labels(*, model: GpuModel, gpus: int) -> dict[str, str]:
    """What GPU Feature Discovery labels a node with: fake and real nodes alike."""
    return {
        "nvidia.com/gpu.present": "true",
        GPU_PRODUCT_LABEL: model.product,
        "nvidia.com/gpu.count": str(gpus),
    }


def node_manifest(*, index: int, model: GpuModel, gpus: int) -> dict[str, Any]:
    name = node_name(index)
    resources = {
        "cpu": "224",
        "memory": "2Ti",
        "pods": "110",
        "ephemeral-storage": "30Ti",
        GPU_RESOURCE: str(gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **gpu_labels(model=model, gpus=gpus),
                RACK_LABEL: f"rack-{index // NODES_PER_RACK:03d}",
                SIMULATED_LABEL: "true",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def create_nodes(api: client.CoreV1Api, *, count: int, model: GpuModel, gpus: int) -> None:
    """Create ``count`` fake GPU nodes in parallel; existing ones are left as they are."""

    def create(index: int) -> None:
        try:
            api.create_node(
                client.V1Node.model_validate(node_manifest(index=index, model=model, gpus=gpus))
            )
        except client.ApiException as error:
            if error.status != 409:
                raise

    with ThreadPoolExecutor(max_workers=CREATE_PARALLELISM) as pool:
        list(pool.map(create, range(count)))


def ready_count(api: client.ApiClient) -> int:
    """Simulated nodes that are Ready, listed a page at a time as plain JSON (10,000
    Node models cost the waiting process more than the apiserver's answer)."""
    nodes = list_all(api, "/api/v1/nodes", query={"labelSelector": f"{SIMULATED_LABEL}=true"})
    return sum(
        1
        for node in nodes
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (node.get("status") or {}).get("conditions") or []
        )
    )
