"""Every path through the node lifecycle, against a real apiserver."""

from __future__ import annotations

import datetime
import time

from kubernetes import client

from support.fixtures import HealthyFleet
from support.fleet import eventually

FATAL_XID = [{"type": "xid", "gpu": 2, "code": 79}]
NVLINK_DOWN = [{"type": "nvlink-down", "gpu": 1, "link": 3}]


def test_fatal_xid_quarantines_drains_repairs_and_revalidates(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    fleet.pod(workload_namespace, "trainer-0", node)
    fleet.inject(node, FATAL_XID)
    eventually(lambda: fleet.node(node).spec.unschedulable, timeout=20, what="cordon")
    assert fleet.taints(node)["pitcrew.dev/quarantined"] == "Xid"
    eventually(lambda: not fleet.pod_exists(workload_namespace, "trainer-0"), what="eviction")
    fleet.wait_phase(node, "Healthy", timeout=90)
    assert fleet.history(node) == [
        "Healthy",
        "Quarantined",
        "Draining",
        "Remediating",
        "Validating",
        "Healthy",
    ]
    assert not fleet.node(node).spec.unschedulable
    assert not any(k.startswith("pitcrew.dev/") for k in fleet.taints(node))
    jobs = (
        client.BatchV1Api(fleet.api)
        .list_namespaced_job("pitcrew-system", label_selector=f"pitcrew.dev/node={node}")
        .items
    )
    kinds = [j.metadata.labels.get("pitcrew.dev/remediation", "probe") for j in jobs]
    # One reset; one validation probe, or up to three when the noisy simulated NVML
    # failed a read and the probe could not run (ProbeIncomplete starts the next).
    assert kinds.count("reset-gpu") == 1
    assert 1 <= kinds.count("probe") <= 3
    assert len(kinds) == kinds.count("reset-gpu") + kinds.count("probe")
    fleet.wait_events(
        node,
        "Xid",
        "Evicted",
        "RemediationStarted",
        "Repaired",
        "ValidationStarted",
        "ValidationPassed",
    )


def test_degraded_node_is_drained_at_the_jobs_next_checkpoint(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    fleet.pod(workload_namespace, "trainer-0", node, labels={"pitcrew.dev/job": "llm"})
    fleet.inject(node, NVLINK_DOWN)
    fleet.wait_phase(node, "Suspect", timeout=20)
    assert fleet.node(node).spec.unschedulable  # no new work lands on it
    assert fleet.pod_exists(workload_namespace, "trainer-0")  # the job keeps running
    checkpoint = datetime.datetime.now(datetime.UTC).isoformat()
    fleet.core.patch_namespaced_pod(
        "trainer-0",
        workload_namespace,
        {"metadata": {"annotations": {"pitcrew.dev/checkpoint-at": checkpoint}}},
    )
    eventually(
        lambda: not fleet.pod_exists(workload_namespace, "trainer-0"),
        what="drain after the checkpoint",
    )
    fleet.wait_phase(node, "Healthy", timeout=90)
    assert "Suspect" in fleet.history(node)
    assert "Validating" in fleet.history(node)


def test_pdb_blocks_the_drain_until_it_allows_it(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    labels = {"app": "protected"}
    fleet.pod(workload_namespace, "protected-0", node, labels=labels)
    policy = client.PolicyV1Api(fleet.api)
    policy.create_namespaced_pod_disruption_budget(
        workload_namespace,
        {
            "metadata": {"name": "protected"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
    )
    eventually(
        lambda: (
            (
                policy.read_namespaced_pod_disruption_budget("protected", workload_namespace).status
                or client.V1PodDisruptionBudgetStatus(
                    current_healthy=0, desired_healthy=0, disruptions_allowed=0, expected_pods=0
                )
            ).current_healthy
            == 1
        ),
        what="PDB computed",
    )
    fleet.inject(node, FATAL_XID)
    draining = fleet.wait_phase(node, "Draining", timeout=20)["status"]
    assert draining["drain"]["startedAt"]
    assert f"{workload_namespace}/protected-0" in draining["drain"]["pending"]
    assert fleet.node(node).spec.unschedulable
    blocked = eventually(
        lambda: (fleet.gpunode(node)["status"].get("drain") or {}).get("blockedBy"),
        what="blockedBy in drain status",
    )
    assert blocked == f"{workload_namespace}/protected"  # the budget by name
    assert fleet.pod_exists(workload_namespace, "protected-0")
    assert fleet.phase(node) == "Draining"
    policy.delete_namespaced_pod_disruption_budget("protected", workload_namespace)
    eventually(
        lambda: not fleet.pod_exists(workload_namespace, "protected-0"),
        timeout=90,
        what="eviction once the PDB allows it",
    )
    fleet.wait_phase(node, "Remediating", "Validating", "Healthy", timeout=30)
    fleet.wait_events(node, "EvictionBlocked")


def test_an_evicted_pod_keeps_its_grace_period_and_the_drain_waits_for_it(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    """The eviction carries no grace override: a pod that takes 8 s of its 60 to exit
    on SIGTERM is given them, and the node is not remediated under it meanwhile."""
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    slow = {"sim.pitcrew.dev/shutdown-after": "8s"}
    fleet.pod(workload_namespace, "slow-0", node, annotations=slow, grace=60)
    fleet.inject(node, FATAL_XID)
    leaving = eventually(
        lambda: (
            (
                pod := fleet.core.read_namespaced_pod("slow-0", workload_namespace)
            ).metadata.deletion_timestamp
            and pod
        ),
        timeout=30,
        what="the pod evicted",
    )
    assert leaving.metadata.deletion_grace_period_seconds == 60  # its own
    while fleet.pod_exists(workload_namespace, "slow-0"):
        assert fleet.phase(node) == "Draining"  # not remediated under a live pod
        time.sleep(0.5)
    exited = datetime.datetime.now(datetime.UTC)
    # The deadline the apiserver set is the eviction plus the pod's grace period.
    evicted = leaving.metadata.deletion_timestamp - datetime.timedelta(seconds=60)
    assert exited - evicted >= datetime.timedelta(seconds=7)  # its 8 s (whole seconds)
    fleet.wait_phase(node, "Remediating", "Validating", "Healthy", timeout=30)


def test_a_foreign_cordon_is_never_undone(healthy_fleet: HealthyFleet) -> None:
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    fleet.core.patch_node(node, {"spec": {"unschedulable": True}})  # kubectl cordon
    fleet.inject(node, FATAL_XID)
    fleet.wait_phase(node, "Remediating", "Validating", timeout=30)
    fleet.wait_phase(node, "Healthy", timeout=90)
    spec = fleet.node(node).spec
    assert spec.unschedulable, "Pitcrew lifted a cordon it did not make"
    assert not any(k.startswith("pitcrew.dev/") for k in fleet.taints(node))
    assert "pitcrew.dev/cordoned-by" not in (fleet.node(node).metadata.annotations or {})


def test_a_burst_is_cordoned_and_each_nodes_actions_are_said_on_the_node(
    healthy_fleet: HealthyFleet,
) -> None:
    fleet = healthy_fleet(size=4, safety={"maxUnhealthy": 3})
    failing = fleet.nodes[:3]
    for node in failing:
        fleet.inject(node, FATAL_XID)
    for node in failing:
        eventually(lambda n=node: fleet.node(n).spec.unschedulable, timeout=20, what="cordon")
        assert fleet.taints(node)["pitcrew.dev/quarantined"] == "Xid"
    for node in failing:
        said = eventually(
            lambda n=node: (
                (xid := [e for e in fleet.events(n) if e.reason == "Xid"])
                and "cordoned and tainted" in " ".join(e.message for e in xid)
                and "Healthy -> Quarantined" in " ".join(e.message for e in xid)
                and xid
            ),
            timeout=15,
            what=f"the cordon and the take-out of {node} said",
        )
        assert sum(e.count for e in said) >= 2  # one action each, in as many counts
        assert fleet.events(node, kind="GPUNode") == []  # said once, on the Node
    assert not fleet.node(fleet.nodes[3]).spec.unschedulable
