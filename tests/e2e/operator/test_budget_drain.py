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
import time
from typing import Any

import pytest
from kubernetes import client

from pitcrew.api.vocabulary import CRASH_LOOP_ANNOTATION
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


# -- pods the eviction API lets go, or never does -------------------------------------------
# Each case: a PodDisruptionBudget that allows no disruption (disruptionsAllowed 0), over
# a ready pod on another node and one pod on the node that fails. The eviction API lets
# the second go at once in the exempt cases (pkg/registry/core/pod/storage/eviction.go),
# as ``kubectl drain`` finds; the drain must too, long before its timeout.

STEADY = "steady"
LEAVING = "leaving"


def budget_pod(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    *,
    node: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
    grace: int = 1,
) -> None:
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "serve", "image": "server:1"}],
            },
        },
    )


def budget_status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    found = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(name, namespace)
    return dict(api.sanitize_for_serialization(found).get("status") or {})


@pytest.mark.parametrize(
    ("annotations", "spec", "status"),
    [
        # Running, never ready; the budget keeps 2 of 2 and has 1: AlwaysAllow lets it go.
        (
            {CRASH_LOOP_ANNOTATION: "true"},
            {"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"},
            (1, 2),
        ),
        # Running, never ready; the budget keeps 1 of 2 and has it: IfHealthyBudget (the
        # default) lets the unready pod go while the budget is healthy.
        ({CRASH_LOOP_ANNOTATION: "true"}, {"minAvailable": 1}, (1, 1)),
        # Bound and not started (an image that takes an hour to pull): Pending pods are
        # deleted without a look at any budget.
        ({"sim.pitcrew.dev/start-after": "1h"}, {"minAvailable": 2}, (1, 2)),
    ],
    ids=["crash-looping-always-allow", "crash-looping-healthy-budget", "pending"],
)
def test_a_pod_the_eviction_api_lets_go_is_evicted_at_once_under_a_budget_allowing_none(
    healthy_fleet: HealthyFleet,
    workload_namespace: str,
    annotations: dict[str, str],
    spec: dict[str, Any],
    status: tuple[int, int],
) -> None:
    fleet = healthy_fleet(size=2)  # the drain's timeout is the default, 30 minutes
    failing, other = fleet.nodes
    labels = {"app": "exempt"}
    budget_pod(fleet.core, workload_namespace, STEADY, node=other, labels=labels)
    budget_pod(
        fleet.core,
        workload_namespace,
        LEAVING,
        node=failing,
        labels=labels,
        annotations=annotations,
    )
    client.PolicyV1Api(fleet.api).create_namespaced_pod_disruption_budget(
        workload_namespace,
        {"metadata": {"name": "exempt"}, "spec": {"selector": {"matchLabels": labels}, **spec}},
    )
    current, desired = status

    def budget_allows_none() -> bool:
        found = budget_status(fleet.api, workload_namespace, "exempt")
        seen = (found.get("currentHealthy"), found.get("desiredHealthy"))
        return seen == (current, desired) and found.get("disruptionsAllowed") == 0

    eventually(budget_allows_none, timeout=60, what=f"the budget at {status}, allowing none")
    fleet.inject(failing, FATAL_XID)
    eventually(
        lambda: not fleet.pod_exists(workload_namespace, LEAVING),
        timeout=45,
        what="the pod evicted at once",
    )
    fleet.wait_phase(failing, "Remediating", "Validating", "Healthy", timeout=30)
    assert "Draining" in fleet.history(failing)
    assert fleet.pod_running(workload_namespace, STEADY)
    said = {e.reason for e in fleet.events(failing)}
    assert "EvictionBlocked" not in said  # never waited for the budget, never refused
    assert not {r for r in said if r.startswith("DrainTimeout")}


def test_a_pod_the_budget_holds_is_not_taken_for_one_it_lets_go(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    """The other side of the rule: a crash-looping pod under a budget short of healthy
    pods (IfHealthyBudget) is refused by the eviction API, and the drain waits for it."""
    fleet = healthy_fleet(size=2)
    failing, other = fleet.nodes
    labels = {"app": "short"}
    budget_pod(fleet.core, workload_namespace, STEADY, node=other, labels=labels)
    crashing = {CRASH_LOOP_ANNOTATION: "true"}
    budget_pod(
        fleet.core, workload_namespace, LEAVING, node=failing, labels=labels, annotations=crashing
    )
    client.PolicyV1Api(fleet.api).create_namespaced_pod_disruption_budget(
        workload_namespace,
        {
            "metadata": {"name": "short"},
            "spec": {"selector": {"matchLabels": labels}, "minAvailable": 2},
        },
    )
    eventually(
        lambda: budget_status(fleet.api, workload_namespace, "short").get("currentHealthy") == 1,
        timeout=60,
        what="the budget short of one healthy pod",
    )
    fleet.inject(failing, FATAL_XID)
    fleet.wait_phase(failing, "Draining", timeout=30)
    blocked = eventually(
        lambda: (fleet.gpunode(failing)["status"].get("drain") or {}).get("blockedBy"),
        what="blockedBy in the drain's status",
    )
    assert blocked == f"{workload_namespace}/short"
    time.sleep(5)
    assert fleet.pod_exists(workload_namespace, LEAVING)
    assert fleet.phase(failing) == "Draining"


def test_a_pod_under_two_budgets_is_said_impossible_and_the_drain_escalates_at_its_timeout(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=2, safety={"drain": {"timeout": "15s"}})
    failing = fleet.nodes[0]
    labels = {"app": "twice", "tier": "gpu"}
    budget_pod(fleet.core, workload_namespace, LEAVING, node=failing, labels=labels)
    eventually(lambda: fleet.pod_running(workload_namespace, LEAVING), what="the pod running")
    budgets = client.PolicyV1Api(fleet.api)
    for name, selector in (("app", {"app": "twice"}), ("tier", {"tier": "gpu"})):
        budgets.create_namespaced_pod_disruption_budget(
            workload_namespace,
            {
                "metadata": {"name": name},
                "spec": {"selector": {"matchLabels": selector}, "minAvailable": 0},
            },
        )
    # What the apiserver answers such an eviction, whatever the budgets allow.
    with pytest.raises(client.ApiException) as refused:
        fleet.core.create_namespaced_pod_eviction(
            LEAVING,
            workload_namespace,
            {"metadata": {"name": LEAVING, "namespace": workload_namespace}},
            dry_run="All",
        )
    assert refused.value.status == 500
    assert "more than one PodDisruptionBudget" in (refused.value.body or "")
    fleet.inject(failing, FATAL_XID)
    fleet.wait_phase(failing, "Draining", timeout=30)
    fleet.wait_events(failing, "EvictionImpossible")
    impossible = [e.message for e in fleet.events(failing) if e.reason == "EvictionImpossible"]
    assert f"{workload_namespace}/app, {workload_namespace}/tier" in impossible[0]
    assert "EvictionFailed" not in {e.reason for e in fleet.events(failing)}  # never asked
    fleet.wait_phase(failing, "Remediating", timeout=60)  # onTimeout: escalate
    fleet.wait_events(failing, "DrainTimeoutEscalate")


def test_force_at_the_timeout_removes_a_pod_stuck_terminating_at_once(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    """A pod whose kubelet never confirms its exit (here: it takes an hour, its grace
    period) is deleted with grace period 0 by a forced drain."""
    fleet = healthy_fleet(size=2, safety={"drain": {"timeout": "10s", "onTimeout": "force"}})
    failing = fleet.nodes[0]
    hung = {"sim.pitcrew.dev/shutdown-after": "1h"}
    budget_pod(
        fleet.core,
        workload_namespace,
        LEAVING,
        node=failing,
        labels={"app": "hung"},
        annotations=hung,
        grace=3600,
    )
    eventually(lambda: fleet.pod_running(workload_namespace, LEAVING), what="the pod running")
    fleet.inject(failing, FATAL_XID)
    eventually(
        lambda: (
            fleet.core.read_namespaced_pod(LEAVING, workload_namespace).metadata.deletion_timestamp
        ),
        timeout=30,
        what="the pod evicted, terminating for its hour",
    )
    eventually(
        lambda: not fleet.pod_exists(workload_namespace, LEAVING),
        timeout=45,
        what="the pod removed by the forced drain",
    )
    fleet.wait_events(failing, "DrainTimeoutForce")
