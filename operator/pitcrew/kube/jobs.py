"""Probe Jobs and remediation Jobs, pinned to one node.

Both are Jobs so that Kubernetes owns retries, deadlines and clean-up
(``ttlSecondsAfterFinished``). They are pinned to the Node by its name, with a
required node affinity on the field ``metadata.name`` (:func:`pinned_to`, as the
DaemonSet controller pins its pods), not by ``spec.nodeName``, so the scheduler
still accounts for the GPUs they take; and not by the ``kubernetes.io/hostname``
label, which the kubelet writes: root on one node could label it with another
node's name and draw that node's probe, or its reset, to itself. They tolerate
the cordon and Pitcrew's own taints, which is how they run on a node that takes
no other work. Names are deterministic (from
the decision's key), so creating a Job twice is a no-op.

Probe pods request every GPU of the node (exclusive), use a low
PriorityClass when the policy names one, and write their report into
``GPUNode.status.probe`` (``pitcrew probe``). The reset Job is the only
privileged workload Pitcrew creates: ``nvidia-smi -r`` needs the device.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import (
    GPU_RESOURCE,
    NODE_LABEL,
    OPERATOR_MANAGER,
    PAIR_ANNOTATION,
    PAIR_LABEL,
    PITCREW_TAINTS,
    PROBE_LABEL,
    RANK_LABEL,
    REMEDIATION_LABEL,
    RUN_LABEL,
    SUITE_LABEL,
)
from pitcrew.kube.client import retrying

TTL_SECONDS = 3600


def _tolerations() -> list[dict[str, str]]:
    return [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
        *({"key": key, "operator": "Exists"} for key in PITCREW_TAINTS),
    ]


@dataclass(frozen=True)
class JobPods:
    """What every pod of Pitcrew's Jobs (probe, pair, reset) needs on this cluster."""

    image_pull_secrets: tuple[str, ...] = ()
    """Secrets to pull the probe and remediation images (a private registry)."""
    runtime_class: str = ""
    """RuntimeClass of GPU pods (``nvidia`` where the NVIDIA runtime is not the default)."""


def pinned_to(node: str) -> dict[str, Any]:
    """The affinity that lets a pod run on Node ``node`` only, by the Node's name."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def _job(
    *,
    name: str,
    namespace: str,
    node: str,
    labels: dict[str, str],
    container: dict[str, Any],
    deadline_seconds: int,
    service_account: str,
    pods: JobPods,
    priority_class: str = "",
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "affinity": pinned_to(node),
        "tolerations": _tolerations(),
        "serviceAccountName": service_account,
        "containers": [container],
    }
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    if pods.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in pods.image_pull_secrets]
    if pods.runtime_class:
        pod_spec["runtimeClassName"] = pods.runtime_class
    all_labels = {
        PROBE_LABEL: "true",
        NODE_LABEL: node,
        "app.kubernetes.io/managed-by": "pitcrew",
        **labels,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": all_labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_seconds,
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "template": {"metadata": {"labels": all_labels}, "spec": pod_spec},
        },
    }


def probe_job(
    *,
    name: str,
    namespace: str,
    node: str,
    suite: str,
    gpus: int,
    image: str,
    deadline_seconds: int,
    priority_class: str,
    service_account: str,
    pods: JobPods,
    resources: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A probe Job: the node's GPUs to itself, plus the CPU and memory ``resources``
    say (a GPU request always equals its limit, so it is set in both)."""
    requested = resources or {}
    gpu = {GPU_RESOURCE: str(gpus)}
    container = {
        "name": "probe",
        "image": image,
        "command": ["pitcrew", "probe", "--node", node, "--suite", suite, "--job", name],
        "resources": {
            "requests": {**requested.get("requests", {}), **gpu},
            "limits": {**requested.get("limits", {}), **gpu},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    return _job(
        name=name,
        namespace=namespace,
        node=node,
        labels={SUITE_LABEL: suite},
        container=container,
        deadline_seconds=deadline_seconds,
        priority_class=priority_class,
        service_account=service_account,
        pods=pods,
    )


def reset_job(
    *,
    name: str,
    namespace: str,
    node: str,
    gpus: tuple[int, ...],
    image: str,
    deadline_seconds: int,
    service_account: str,
    pods: JobPods,
) -> dict[str, Any]:
    target = ["-i", ",".join(str(g) for g in gpus)] if gpus else []
    container = {
        "name": "reset-gpu",
        "image": image,
        "command": ["nvidia-smi", "-r", *target],
        "securityContext": {"privileged": True},
    }
    return _job(
        name=name,
        namespace=namespace,
        node=node,
        labels={REMEDIATION_LABEL: "reset-gpu"},
        container=container,
        deadline_seconds=deadline_seconds,
        service_account=service_account,
        pods=pods,
    )


def create(api: client.ApiClient, job: dict[str, Any]) -> bool:
    """Create ``job``; False when it already exists."""
    try:
        retrying(client.BatchV1Api(api).create_namespaced_job)(
            job["metadata"]["namespace"],
            client.V1Job.model_validate(job),
            field_manager=OPERATOR_MANAGER,
        )
    except client.ApiException as error:
        if error.status == 409:
            return False
        raise
    return True


def delete(api: client.ApiClient, *, namespace: str, name: str) -> bool:
    """Delete a Job and its pods (background propagation); False when it is gone
    already. Its pods are deleted by the garbage collector with their grace period."""
    try:
        retrying(client.BatchV1Api(api).delete_namespaced_job)(
            name, namespace, propagation_policy="Background"
        )
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


PAIR_PORT = 29600
TERMINATION_LOG = "/dev/termination-log"


def pair_ident(run: str, pair: str, attempt: int) -> str:
    """The label value that ties a pair test's pods to its entry in the run's status."""
    return f"{zlib.crc32(f'{run}/{pair}/{attempt}'.encode()):08x}"


def pair_jobs(
    *,
    run: str,
    pair: str,
    attempt: int,
    nodes: list[str],
    master_address: str,
    namespace: str,
    image: str,
    gpus: int,
    deadline_seconds: int,
    service_account: str,
    pods: JobPods,
    priority_class: str = "",
    resources: dict[str, dict[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Two Jobs, one per node, that run one multi-node all-reduce together.

    Host networking gives the ranks the nodes' own addresses (and their
    InfiniBand devices); rank 0 on the first node is the rendezvous and leaves
    the measured bus bandwidth in its termination message, which the operator
    reads from the pod and judges: the probe needs no write access to the API.
    Pair pods run at the probe PriorityClass with the probe's CPU and memory."""
    requested = resources or {}
    gpu = {GPU_RESOURCE: str(gpus)}
    ident = pair_ident(run, pair, attempt)
    result = []
    for rank, node in enumerate(nodes):
        container = {
            "name": "pair",
            "image": image,
            "command": ["pitcrew", "probe-pair", "--run", run, "--pair", pair, "--rank", str(rank)],
            "env": [
                {"name": "MASTER_ADDR", "value": master_address},
                {"name": "MASTER_PORT", "value": str(PAIR_PORT)},
                {"name": "WORLD_SIZE", "value": str(len(nodes))},
                {"name": "RANK", "value": str(rank)},
            ],
            "resources": {
                "requests": {**requested.get("requests", {}), **gpu},
                "limits": {**requested.get("limits", {}), **gpu},
            },
            "terminationMessagePath": TERMINATION_LOG,
            "terminationMessagePolicy": "File",
        }
        job = _job(
            name=f"pitcrew-pair-{ident}-{rank}",
            namespace=namespace,
            node=node,
            labels={PAIR_LABEL: ident, RANK_LABEL: str(rank), RUN_LABEL: run[:63]},
            container=container,
            deadline_seconds=deadline_seconds,
            service_account=service_account,
            priority_class=priority_class,
            pods=pods,
        )
        template = job["spec"]["template"]
        template["metadata"]["annotations"] = {PAIR_ANNOTATION: pair}
        template["spec"]["hostNetwork"] = True
        result.append(job)
    return result
