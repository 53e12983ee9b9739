"""GPUNode objects: create one per Node, and write status by server-side apply.

Server-side apply lets two writers share ``status`` without overwriting each
other: each applies only the fields it owns under its own field manager
(agent, probe, operator; see :mod:`pitcrew.api.gpunode`), and a field it
stops sending is removed because it owned it. No read-modify-write, no
conflicts between the agent's 30-second writes and the operator's decisions.
The operator also applies ``spec.checks``, the configuration each agent runs
and follows (:func:`follow`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, cast

from kubernetes import client, watch

from pitcrew.api.gpunode import GPUNode, GPUNodeStatus
from pitcrew.api.meta import API_VERSION, GROUP, VERSION
from pitcrew.kube.client import request, retrying

logger = logging.getLogger(__name__)
APPLY = "application/apply-patch+yaml"
AGENT_FIELDS = {"checks", "gpus", "gpu_count", "healthy_gpus", "last_heartbeat"}
PROBE_FIELDS = {"probe"}
PRE_PULL_FIELDS = {"images"}


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


def _apply(
    api: client.ApiClient, node: str, fields: dict[str, Any], *, manager: str, status: bool
) -> dict[str, Any]:
    """Server-side apply ``fields`` to GPUNode ``node`` (its status subresource, or
    the object itself) as ``manager``."""
    body = {"apiVersion": API_VERSION, "kind": GPUNode.KIND, "metadata": {"name": node}}
    path = f"/apis/{GROUP}/{VERSION}/{GPUNode.PLURAL}/{node}" + ("/status" if status else "")
    return retrying(request)(
        api,
        "PATCH",
        path,
        body={**body, **fields},
        content_type=APPLY,
        query={"fieldManager": manager, "force": "true"},
    )


def apply_checks(
    api: client.ApiClient, *, node: str, checks: dict[str, Any], manager: str
) -> dict[str, Any]:
    """Apply ``spec.checks`` (the agent's configuration) to GPUNode ``node``."""
    spec = {"spec": {"nodeName": node, "checks": checks}}
    return _apply(api, node, spec, manager=manager, status=False)


def follow(
    api: client.ApiClient,
    node: str,
    handler: Callable[[dict[str, Any]], object],
    *,
    stop: threading.Event,
    backoff: float = 5.0,
) -> None:
    """Hand every version of GPUNode ``node`` to ``handler``, until ``stop``: a list
    and a watch of that one object (``metadata.name`` field selector), relisted when
    the watch ends or fails. This is how an agent learns its checks within moments of
    a policy change, without polling the apiserver every sweep."""
    custom = client.CustomObjectsApi(api)
    selector = f"metadata.name={node}"
    while not stop.is_set():
        try:
            listing = cast(
                dict[str, Any],
                custom.list_cluster_custom_object(
                    GROUP, VERSION, GPUNode.PLURAL, field_selector=selector
                ),
            )
            for item in listing.get("items", []):
                handler(item)
            stream = watch.Watch().stream(
                custom.list_cluster_custom_object,
                GROUP,
                VERSION,
                GPUNode.PLURAL,
                field_selector=selector,
                resource_version=listing["metadata"]["resourceVersion"],
                timeout_seconds=300,
            )
            for event in stream:
                if stop.is_set():
                    return
                if event["type"] in ("ADDED", "MODIFIED"):
                    handler(event["object"])
        except Exception as error:  # any failure: relist after a pause
            logger.warning("watch of GPUNode %s interrupted (%s); relisting", node, error)
            stop.wait(backoff)


def apply_status(
    api: client.ApiClient, *, node: str, status: dict[str, Any], manager: str
) -> dict[str, Any]:
    """Apply ``status`` (only the fields ``manager`` owns) to GPUNode ``node``."""
    return _apply(api, node, {"status": status}, manager=manager, status=True)
