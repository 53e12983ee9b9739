"""GPUNode objects: create one per Node, and write status by server-side apply.

Server-side apply lets two writers share ``status`` without overwriting each
other: each applies only the fields it owns under its own field manager
(agent, probe, operator; see :mod:`pitcrew.api.gpunode`), and a field it
stops sending is removed because it owned it. No read-modify-write, no
conflicts between the agent's 30-second writes and the operator's decisions.
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from pitcrew.api.gpunode import GPUNode, GPUNodeStatus
from pitcrew.api.meta import API_VERSION, GROUP, VERSION
from pitcrew.kube.client import request, retrying

APPLY = "application/apply-patch+yaml"
AGENT_FIELDS = {"checks", "gpus", "gpu_count", "healthy_gpus", "last_heartbeat"}
PROBE_FIELDS = {"probe"}


def ensure(api: client.ApiClient, *, node: str, node_uid: str) -> dict[str, Any] | None:
    """Create the GPUNode for ``node`` (owned by the Node, so it is garbage
    collected with it); the new object, or None when it already exists (409 means
    exactly that here, so it is not retried)."""
    body = {
        "apiVersion": API_VERSION,
        "kind": GPUNode.KIND,
        "metadata": {
            "name": node,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
            ],
            "labels": {"app.kubernetes.io/managed-by": "pitcrew"},
        },
        "spec": {"nodeName": node},
    }
    try:
        created = retrying(client.CustomObjectsApi(api).create_cluster_custom_object)(
            GROUP, VERSION, GPUNode.PLURAL, body
        )
    except client.ApiException as error:
        if error.status != 409:
            raise
        return None
    return cast(dict[str, Any], created)


def status_fields(
    status: GPUNodeStatus, fields: set[str] | None = None, *, exclude: set[str] | None = None
) -> dict[str, Any]:
    dumped: dict[str, Any] = status.model_dump(
        mode="json", by_alias=True, exclude_none=True, include=fields, exclude=exclude
    )
    return dumped


def apply_status(
    api: client.ApiClient, *, node: str, status: dict[str, Any], manager: str
) -> dict[str, Any]:
    """Apply ``status`` (only the fields ``manager`` owns) to GPUNode ``node``."""
    body = {
        "apiVersion": API_VERSION,
        "kind": GPUNode.KIND,
        "metadata": {"name": node},
        "status": status,
    }
    return retrying(request)(
        api,
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/{GPUNode.PLURAL}/{node}/status",
        body=body,
        content_type=APPLY,
        query={"fieldManager": manager, "force": "true"},
    )
