"""A drain of several nodes at once never takes more pods than their budget allows.

The pods are watched for the whole drain, event by event, as the apiserver orders
them: at no moment may fewer of them be available (Running, Ready, not being
deleted) than the PodDisruptionBudget keeps. Pitcrew asks for evictions only as
the watched budget allows; the apiserver refuses the rest; a direct delete, or a
drain that counted wrong and forced its way, would show here as a dip.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from kubernetes import client

from support.fixtures import HealthyFleet
from support.fleet import eventually

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
REPLICAS = 6
HOST_LABEL = "e2e.pitcrew.dev/guarded-host"


def available(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return (
        ready and status.get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
    )


class PodWatch:
    """The pods of one app, event by event, and the fewest available at any moment."""

    def __init__(self, core: client.CoreV1Api, namespace: str, selector: str) -> None:
        listing = core.list_namespaced_pod(namespace, label_selector=selector)
        self.pods = {p.metadata.name: available(core.api_client.sanitize_for_serialization(p))
                     for p in listing.items}  # fmt: skip
        self.fewest = sum(self.pods.values())
        self.evicted: set[str] = set()
        self._stop = threading.Event()
        self._response = core.list_namespaced_pod(
            namespace,
            label_selector=selector,
            watch=True,
            resource_version=listing.metadata.resource_version,
            timeout_seconds=600,
            _preload_content=False,
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._follow()
        except Exception:
            if not self._stop.is_set():  # closed under the reader by stop(): expected
                raise

    def _follow(self) -> None:
        for line in self._response:
            if self._stop.is_set():
                return
            event = json.loads(line)
            pod = event["object"]
            name = pod["metadata"]["name"]
            if event["type"] == "DELETED":
                self.pods.pop(name, None)
            else:
                self.pods[name] = available(pod)
                if pod["metadata"].get("deletionTimestamp"):
                    self.evicted.add(name)
            self.fewest = min(self.fewest, sum(self.pods.values()))

    def stop(self) -> None:
        """End the watch: shutting the socket down wakes the reader (closing the
        response from this thread would first read the endless stream to its end)."""
        self._stop.set()
        self._response.shutdown()
        self._thread.join(timeout=10)


def test_a_drain_of_three_nodes_never_takes_more_pods_than_the_budget_allows(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=4, safety={"maxUnhealthy": 3, "maxConcurrentDrains": 3})
    draining, sink = fleet.nodes[:3], fleet.nodes[3]
    for node in draining:
        fleet.core.patch_node(node, {"metadata": {"labels": {HOST_LABEL: "true"}}})
    labels = {"app": "guarded"}
    client.AppsV1Api(fleet.api).create_namespaced_deployment(
        workload_namespace,
        {
            "metadata": {"name": "guarded"},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {HOST_LABEL: "true"},
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "serve", "image": "server:1"}],
                    },
                },
            },
        },
    )
    budgets = client.PolicyV1Api(fleet.api)
    budgets.create_namespaced_pod_disruption_budget(
        workload_namespace,
        {
            "metadata": {"name": "guarded"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
        },
    )

    def budget_allows_one() -> bool:
        status = budgets.read_namespaced_pod_disruption_budget("guarded", workload_namespace).status
        return status is not None and (status.current_healthy, status.disruptions_allowed) == (
            REPLICAS,
            1,
        )

    eventually(budget_allows_one, timeout=60, what="6 pods healthy under the budget")
    # Room for the replacements on the fourth node only.
    fleet.core.patch_node(sink, {"metadata": {"labels": {HOST_LABEL: "true"}}})
    watch = PodWatch(fleet.core, workload_namespace, "app=guarded")
    try:
        for node in draining:
            fleet.inject(node, FATAL_XID)

        def drained() -> bool:
            pods = fleet.core.list_namespaced_pod(workload_namespace, label_selector="app=guarded")
            return (
                all(p.spec.node_name == sink for p in pods.items)
                and sum(1 for p in pods.items if p.status.phase == "Running") == REPLICAS
            )

        eventually(drained, timeout=180, what="all 6 pods moved to the fourth node")
    finally:
        watch.stop()
    assert len(watch.evicted) >= REPLICAS
    assert watch.fewest >= REPLICAS - 1, (
        f"{watch.fewest} pods available at one moment: the budget keeps {REPLICAS - 1}"
    )
    for node in draining:
        history = fleet.history(node)
        assert "Draining" in history
