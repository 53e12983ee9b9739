"""Apply a :class:`~pitcrew.core.node_edits.NodeEdit` to a Node, safely.

``spec.taints`` has no merge key, so adding one taint means writing the whole
list. The write is a JSON patch that starts with a ``test`` of the
resourceVersion the edit was computed from: if anyone (a kubelet, another
controller, a human with kubectl) changed the Node in between, the patch
fails, the Node is re-read and the edit recomputed, instead of silently
dropping someone else's taint.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_MANAGER
from pitcrew.core import node_edits
from pitcrew.core.convert import node_view
from pitcrew.core.node_edits import NodeAction
from pitcrew.kube.client import retrying

ATTEMPTS = 5


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _patch(node: dict[str, Any], edit: node_edits.NodeEdit) -> list[dict[str, Any]]:
    meta = node["metadata"]
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
        {"op": "add", "path": "/spec/unschedulable", "value": edit.unschedulable},
        {
            "op": "add",
            "path": "/spec/taints",
            "value": [
                {"key": t.key, "value": t.value, "effect": t.effect or "NoSchedule"}
                for t in edit.taints
            ],
        },
    ]
    annotations = meta.get("annotations") or {}
    if edit.annotations and not annotations:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    for key, value in edit.annotations.items():
        path = f"/metadata/annotations/{_escape(key)}"
        if value is None:
            if key in annotations:
                ops.append({"op": "remove", "path": path})
        else:
            ops.append({"op": "add", "path": path, "value": value})
    return ops


def read_raw(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    """The Node as JSON, without building client models (cheaper by far)."""
    response: Any = retrying(core.read_node)(name, _preload_content=False)
    node: dict[str, Any] = json.loads(response.data)
    return node


def read(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    """The Node as JSON; None when it is gone."""
    try:
        return read_raw(client.CoreV1Api(api), name)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def apply_action(
    api: client.ApiClient, name: str, action: NodeAction, *, known: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """Carry out a node action; the patched Node, or None when there was nothing to change.

    ``known`` is the Node as the watch last delivered it: the first attempt is
    computed from it without a read (its ``test`` of the resourceVersion refuses
    the patch if the Node has moved on since), later attempts from a fresh read."""
    core = client.CoreV1Api(api)
    for attempt in range(ATTEMPTS):
        node = known if attempt == 0 and known is not None else read_raw(core, name)
        edit = node_edits.plan(node_view(node), action)
        if edit is None:
            return None
        try:
            response: Any = core.patch_node(
                name,
                _patch(node, edit),
                field_manager=OPERATOR_MANAGER,
                _content_type="application/json-patch+json",
                _preload_content=False,
            )
            patched: dict[str, Any] = json.loads(response.data)
            return patched
        except client.ApiException as error:
            if error.status not in (409, 422):  # failed test op: the Node moved on
                raise
    raise RuntimeError(f"node {name} kept changing; gave up after {ATTEMPTS} attempts")


def annotate(api: client.ApiClient, name: str, annotations: dict[str, str | None]) -> None:
    retrying(client.CoreV1Api(api).patch_node)(
        name,
        {"metadata": {"annotations": annotations}},
        field_manager=OPERATOR_MANAGER,
        _content_type="application/merge-patch+json",
    )
