"""Periodic verification of idle nodes, on the real apiserver and kube-scheduler: idle
nodes are verified without a cordon, a busy one is not, a failing one is taken out, and
a workload that arrives preempts the probe and is scheduled."""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import NODE_LABEL
from support.fleet import NAMESPACE, PROBE_PRIORITY, Fleet, eventually, probe_priority

INTERVAL = datetime.timedelta(minutes=5)


def periodic_policy(fleet: Fleet, **periodic: Any) -> None:
    probe_priority(fleet.api)
    fleet.policy(
        validation={
            "burnInOnJoin": False,
            "timeout": "2m",
            "priorityClassName": PROBE_PRIORITY,
            "periodic": {"enabled": True, "interval": "5m", "maxConcurrent": 2, **periodic},
        }
    )


def verification(fleet: Fleet, node: str) -> dict[str, Any]:
    return dict((fleet.gpunode(node).get("status") or {}).get("verification") or {})


def passed(fleet: Fleet, node: str, timeout: float = 150) -> dict[str, Any]:
    """The node's verification once it passed; on a timeout, what it shows instead
    (its verification status and Events), so a failure on a loaded machine says why."""
    try:
        found: dict[str, Any] = eventually(
            lambda: (v := verification(fleet, node)).get("lastResult") == "Passed" and v,
            timeout=timeout,
            what=f"{node} verified",
        )
    except AssertionError as error:
        reasons = [f"{e.reason}: {e.message}" for e in fleet.events(node)]
        status = verification(fleet, node)
        raise AssertionError(f"{error}; status {status}; events {reasons}") from None
    return found


def when(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def verify_jobs(fleet: Fleet, node: str) -> list[client.V1Job]:
    jobs = client.BatchV1Api(fleet.api).list_namespaced_job(
        NAMESPACE, label_selector=f"{NODE_LABEL}={node}"
    )
    return [j for j in jobs.items if j.metadata.name.startswith("pitcrew-verify-")]


def never_cordoned(fleet: Fleet, node: str) -> bool:
    return not fleet.node(node).spec.unschedulable and fleet.history(node) == ["Healthy"]


def test_idle_nodes_are_verified_in_service_and_a_busy_node_is_not(
    fleet_factory: type[Fleet], workload_namespace: str
) -> None:
    fleet = fleet_factory(size=3)
    busy = fleet.nodes[2]
    fleet.pod(workload_namespace, "trainer-0", busy)
    periodic_policy(fleet)
    for node in fleet.nodes[:2]:
        found = passed(fleet, node)
        assert when(found["next"]) - when(found["lastTime"]) == INTERVAL
        assert fleet.phase(node) == "Healthy"
        assert never_cordoned(fleet, node)
        fleet.wait_events(node, "VerificationStarted", "VerificationPassed")
    # The busy node stays due and untouched while its workload runs.
    waiting = verification(fleet, busy)
    assert "lastResult" not in waiting
    assert waiting.get("next")
    assert not verify_jobs(fleet, busy)
    assert fleet.pod_running(workload_namespace, "trainer-0")


def test_a_failing_verification_takes_the_node_out(fleet_factory: type[Fleet]) -> None:
    fleet = fleet_factory(size=2)
    bad = fleet.nodes[0]
    # A GEMM at a third of its speed: no passive check can see it, the probe does.
    fleet.inject(bad, [{"type": "slow-gemm", "gpu": 4, "factor": 3}])
    periodic_policy(fleet)
    eventually(
        lambda: any(
            h["to"] == "Quarantined" and h["reason"] == "Gemm"
            for h in (fleet.gpunode(bad).get("status") or {}).get("history", [])
        ),
        timeout=90,
        what=f"{bad} quarantined by its verification",
    )
    fleet.wait_events(bad, "VerificationFailed")
    passed(fleet, fleet.nodes[1])


def test_a_workload_arriving_preempts_the_probe_and_is_scheduled(
    fleet_factory: type[Fleet], workload_namespace: str
) -> None:
    fleet = fleet_factory(size=1)
    (node,) = fleet.nodes
    # This node's probes run for ten minutes: long enough to be preempted.
    fleet.core.patch_node(node, {"metadata": {"annotations": {"sim.pitcrew.dev/probe-for": "10m"}}})
    periodic_policy(fleet)
    job = eventually(
        lambda: verification(fleet, node).get("job"), timeout=60, what="a verification"
    )
    eventually(
        lambda: any(
            p.status.phase == "Running"
            for p in fleet.core.list_namespaced_pod(
                NAMESPACE, label_selector=f"job-name={job}"
            ).items
        ),
        what="the probe pod running",
    )
    # The workload asks for all 8 GPUs the probe holds; the scheduler preempts the probe.
    fleet.pod(workload_namespace, "trainer-0", node)
    found = eventually(
        lambda: (
            verification(fleet, node).get("lastResult") == "Preempted" and verification(fleet, node)
        ),
        timeout=60,
        what="the verification preempted",
    )
    assert found.get("job", "") == ""
    eventually(lambda: not verify_jobs(fleet, node), what="the probe Job deleted")
    assert fleet.phase(node) == "Healthy"
    assert never_cordoned(fleet, node)
    assert fleet.pod_running(workload_namespace, "trainer-0")
