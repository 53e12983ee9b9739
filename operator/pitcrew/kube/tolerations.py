"""Add a toleration to pending pods: how a job's pod reaches the spare reserved for it.

Kubernetes lets a pod's ``spec.tolerations`` grow after creation (additions only),
and nothing else of a pending pod's scheduling constraints change; the scheduler
requeues a pod whose tolerations changed. ``spec.tolerations`` has no merge key, so
the write is the whole list, in a JSON patch that starts with a ``test`` of the
resourceVersion it was computed from (as node edits are, :mod:`pitcrew.kube.nodes`):
a pod that changed in between is read again and the edit recomputed. A pod already
bound to a node, finished, being deleted or gone is left alone, as is one that
tolerates the taint already.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_MANAGER
from pitcrew.core.views import PodView
from pitcrew.kube.client import retrying

ATTEMPTS = 5


def toleration(taint: str, value: str) -> dict[str, str]:
    """The toleration of ``taint=value:NoSchedule`` (and of nothing else)."""
    return {"key": taint, "operator": "Equal", "value": value, "effect": "NoSchedule"}


def patch(pod: dict[str, Any], *, taint: str, value: str) -> list[dict[str, Any]] | None:
    """The JSON patch that adds the toleration to ``pod``; None when it needs none
    (bound to a node, no longer pending, being deleted, or tolerating it already)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase", "Pending")
    if spec.get("nodeName") or phase != "Pending" or meta.get("deletionTimestamp"):
        return None
    wanted = toleration(taint, value)
    current = list(spec.get("tolerations") or [])
    if any({k: t.get(k) for k in wanted} == wanted for t in current):
        return None
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
        {"op": "add", "path": "/spec/tolerations", "value": [*current, wanted]},
    ]


def tolerate(
    api: client.ApiClient, pods: Iterable[PodView], *, taint: str, value: str
) -> list[str]:
    """Add the toleration of ``taint=value`` to each of ``pods`` that still waits for a
    node; the keys of the pods changed."""
    core = client.CoreV1Api(api)
    changed = []
    for pod in pods:
        if _tolerate_one(core, pod, taint=taint, value=value):
            changed.append(pod.key)
    return changed


def _tolerate_one(core: client.CoreV1Api, pod: PodView, *, taint: str, value: str) -> bool:
    refused = ""
    for _ in range(ATTEMPTS):
        try:
            response: Any = retrying(core.read_namespaced_pod)(
                pod.name, pod.namespace, _preload_content=False
            )
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise
        ops = patch(json.loads(response.data), taint=taint, value=value)
        if ops is None:
            return False
        try:
            core.patch_namespaced_pod(
                pod.name,
                pod.namespace,
                ops,
                field_manager=OPERATOR_MANAGER,
                _content_type="application/json-patch+json",
                _preload_content=False,
            )
        except client.ApiException as error:
            if error.status == 404:
                return False
            if error.status not in (409, 422):  # failed test op: the pod moved on
                raise
            refused = str(error.reason)
            continue
        return True
    raise RuntimeError(
        f"pod {pod.key}: the toleration was refused {ATTEMPTS} times (last: {refused})"
    )
