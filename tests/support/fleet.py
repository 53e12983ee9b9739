"""Helpers for end-to-end tests: private GPU nodes, policies, faults, waiting.

Each test builds its own small fleet (fresh kwok nodes with a unique group
label) and a policy selecting only that group, so tests never share nodes or
policies and can run in any order against one devcluster.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import DEFAULT_NAMESPACE

GROUP, VERSION = "pitcrew.dev", "v1alpha1"
GROUP_LABEL = "e2e.pitcrew.dev/group"
NAMESPACE = DEFAULT_NAMESPACE


PROBE_PRIORITY = "e2e-probe-priority"


def probe_priority(api: client.ApiClient) -> None:
    """A PriorityClass like the chart's probe class (not the chart's own name: the
    chart test installs that one): below every workload, preempting nothing."""
    try:
        client.SchedulingV1Api(api).create_priority_class(
            {
                "metadata": {"name": PROBE_PRIORITY},
                "value": -10,
                "preemptionPolicy": "Never",
                "description": "Pitcrew probes: any workload preempts them.",
            }
        )
    except client.ApiException as error:
        if error.status != 409:
            raise


def eventually(
    check: Callable[[], Any], *, timeout: float = 60.0, what: str, interval: float = 0.25
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


NODE_MAINTENANCE = ("nodemaintenance.medik8s.io", "v1beta1", "NodeMaintenance")
NODE_MAINTENANCE_SCHEMA: dict[str, Any] = {
    # medik8s node-maintenance-operator's v1beta1 schema, trimmed to what Pitcrew reads.
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["nodeName"],
            "properties": {"nodeName": {"type": "string"}, "reason": {"type": "string"}},
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def crd(
    api: client.ApiClient,
    group: str,
    version: str,
    kind: str,
    schema: dict[str, Any] | None = None,
    *,
    scope: str = "Namespaced",
) -> None:
    """A CRD as its project publishes it, trimmed to ``schema`` (the fields Pitcrew
    reads; anything else kept as written), and served before this returns."""
    plural = f"{kind.lower()}s"
    try:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(
            {
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {
                    "group": group,
                    "scope": scope,
                    "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                    "versions": [
                        {
                            "name": version,
                            "served": True,
                            "storage": True,
                            "schema": {
                                "openAPIV3Schema": schema
                                or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    ],
                },
            }
        )
    except client.ApiException as error:
        if error.status != 409:
            raise
    custom = client.CustomObjectsApi(api)
    eventually(lambda: _served(custom, group, version, plural, scope), what=f"{kind} CRD served")


def _served(
    custom: client.CustomObjectsApi, group: str, version: str, plural: str, scope: str
) -> bool:
    try:
        if scope == "Cluster":
            custom.list_cluster_custom_object(group, version, plural)
        else:
            custom.list_namespaced_custom_object(group, version, "default", plural)
    except client.ApiException:
        return False
    return True


class Fleet:
    """A private group of simulated GPU nodes and the policy that manages them."""

    def __init__(self, api: client.ApiClient, *, size: int, name: str | None = None) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.group = name or f"g{uuid.uuid4().hex[:6]}"
        self.nodes = [f"{self.group}-n{i}" for i in range(size)]
        for node in self.nodes:
            self.add_node(node)
        eventually(lambda: all(self.ready(n) for n in self.nodes), what="nodes Ready")

    def add_node(self, name: str, annotations: dict[str, str] | None = None) -> None:
        resources = {"cpu": "224", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": "8"}
        self.core.create_node(
            {
                "metadata": {
                    "name": name,
                    "annotations": annotations or {},
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                        "pitcrew.dev/simulated": "true",
                        GROUP_LABEL: self.group,
                    },
                },
                "status": {"capacity": resources, "allocatable": resources},
            }
        )

    def ready(self, node: str) -> bool:
        conditions = self.core.read_node(node).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    def policy(self, **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPUHealthPolicy",
            "metadata": {"name": self.group},
            "spec": {
                "nodeSelector": {"matchLabels": {GROUP_LABEL: self.group}},
                "validation": {"burnInOnJoin": False, "timeout": "2m"},
                "checks": {"interval": "2s", "heartbeat": "30s"},
                **spec,
            },
        }
        created: dict[str, Any] = self.custom.create_cluster_custom_object(
            GROUP, VERSION, "gpuhealthpolicies", body
        )
        return created

    def policy_status(self) -> dict[str, Any]:
        found = self.custom.get_cluster_custom_object(
            GROUP, VERSION, "gpuhealthpolicies", self.group
        )
        return dict(found.get("status") or {})

    def gpunode(self, node: str) -> dict[str, Any]:
        try:
            found: dict[str, Any] = self.custom.get_cluster_custom_object(
                GROUP, VERSION, "gpunodes", node
            )
        except client.ApiException as error:
            if error.status == 404:
                return {}
            raise
        return found

    def phase(self, node: str) -> str:
        return str((self.gpunode(node).get("status") or {}).get("phase", ""))

    def wait_phase(self, node: str, *phases: str, timeout: float = 60.0) -> dict[str, Any]:
        found: dict[str, Any] = eventually(
            lambda: (
                (g := self.gpunode(node)) and (g.get("status") or {}).get("phase") in phases and g
            ),
            timeout=timeout,
            what=f"{node} in {phases} (now {self.phase(node)})",
        )
        return found

    def history(self, node: str) -> list[str]:
        status = self.gpunode(node).get("status") or {}
        return [h["to"] for h in status.get("history", [])]

    def inject(self, node: str, faults: list[dict[str, Any]]) -> datetime.datetime:
        self.core.patch_node(
            node, {"metadata": {"annotations": {"sim.pitcrew.dev/faults": json.dumps(faults)}}}
        )
        return datetime.datetime.now(datetime.UTC)

    def node(self, node: str) -> client.V1Node:
        return self.core.read_node(node)

    def taints(self, node: str) -> dict[str, str]:
        return {t.key: t.value or "" for t in self.node(node).spec.taints or []}

    def pod_running(self, namespace: str, name: str) -> bool:
        try:
            return self.core.read_namespaced_pod(name, namespace).status.phase == "Running"
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise

    def pod(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        gpus: int = 8,
        owners: list[dict[str, str]] | None = None,
        grace: int = 1,
    ) -> None:
        self.core.create_namespaced_pod(
            namespace,
            {
                "metadata": {
                    "name": name,
                    "labels": labels or {},
                    "annotations": annotations or {},
                    "ownerReferences": owners or [],
                },
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [
                        {
                            "name": "train",
                            "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                    "terminationGracePeriodSeconds": grace,
                },
            },
        )
        eventually(
            lambda: self.core.read_namespaced_pod(name, namespace).status.phase == "Running",
            what=f"pod {name} Running",
        )

    def pod_exists(self, namespace: str, name: str) -> bool:
        try:
            self.core.read_namespaced_pod(name, namespace)
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def events(self, node: str, kind: str = "Node") -> list[client.CoreV1Event]:
        return [
            e
            for e in self.core.list_namespaced_event("default").items
            if e.involved_object.name == node and e.involved_object.kind == kind
        ]

    def wait_events(self, node: str, *reasons: str, timeout: float = 15.0) -> list[str]:
        """Wait until the node has Events with all ``reasons`` (Pitcrew posts Events
        from a background thread, a moment after the action); all reasons seen."""
        found: list[str] = eventually(
            lambda: (
                (seen := [e.reason for e in self.events(node)])
                and set(reasons) <= set(seen)
                and seen
            ),
            timeout=timeout,
            what=f"events {reasons} on {node}",
        )
        return found

    def cleanup(self) -> None:
        with contextlib.suppress(client.ApiException):
            self.custom.delete_cluster_custom_object(
                GROUP, VERSION, "gpuhealthpolicies", self.group
            )
        for node in self.nodes:
            with contextlib.suppress(client.ApiException):
                self.core.delete_node(node)
