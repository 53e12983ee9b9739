"""A spare serves the job that lost a node, on the real scheduler of the devcluster.

Four 8-GPU nodes under a policy that holds one spare; a three-pod training job (a plain
Deployment whose pods carry a JobSet's job label, and nothing of Pitcrew's) fills the
other three; another 8-GPU pod already waits for capacity. A fatal Xid on a node of the
job: Pitcrew takes it out and reserves the spare for the job, the job's replacement pod
gets the reservation's toleration and runs on the spare, and the other pod, which
waited first, still waits. The seconds from the fault to the replacement Running are
printed (docs/benchmarks.md, "A spare for the job that lost a node").
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from kubernetes import client

from support.fleet import GROUP_LABEL, Fleet, eventually

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
JOBSET = "jobset.sigs.k8s.io/jobset-name"
RESERVED = "pitcrew.dev/reserved"


def gpu_pod_spec(group: str) -> dict[str, Any]:
    return {
        "nodeSelector": {GROUP_LABEL: group},
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "train",
                "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": "8"}},
            }
        ],
    }


def pods_of(fleet: Fleet, namespace: str, selector: str) -> list[client.V1Pod]:
    pods = fleet.core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def transition(fleet: Fleet, node: str, to: str, *, reason: str | None = None) -> datetime.datetime:
    """When ``node`` last went to phase ``to`` (for ``reason``), by its GPUNode history."""
    history = fleet.gpunode(node)["status"]["history"]
    times = [h["time"] for h in history if h["to"] == to and reason in (None, h["reason"])]
    return datetime.datetime.fromisoformat(times[-1].replace("Z", "+00:00"))


def test_the_jobs_replacement_runs_on_the_spare_and_the_other_waiting_pod_stays_pending(
    fleet_factory: type[Fleet], workload_namespace: str
) -> None:
    fleet = fleet_factory(size=4)
    fleet.policy(spares={"count": 1})
    settled = eventually(
        lambda: (
            (phases := {n: fleet.phase(n) for n in fleet.nodes})
            and sorted(phases.values()) == ["Healthy", "Healthy", "Healthy", "Spare"]
            and phases
        ),
        timeout=60,
        what="three nodes Healthy and one Spare",
    )
    spare = next(n for n, phase in settled.items() if phase == "Spare")
    labels = {"app": "llm", JOBSET: "llm"}
    client.AppsV1Api(fleet.api).create_namespaced_deployment(
        workload_namespace,
        {
            "metadata": {"name": "llm"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": gpu_pod_spec(fleet.group)},
            },
        },
    )
    running = eventually(
        lambda: (
            (pods := pods_of(fleet, workload_namespace, "app=llm"))
            and len(pods) == 3
            and all(p.status.phase == "Running" for p in pods)
            and pods
        ),
        timeout=60,
        what="the job's three pods Running",
    )
    assert spare not in {p.spec.node_name for p in running}  # the spare taint kept them off
    fleet.core.create_namespaced_pod(
        workload_namespace,
        {
            "metadata": {"name": "waiting", "labels": {"app": "other"}},
            "spec": gpu_pod_spec(fleet.group),
        },
    )
    eventually(
        lambda: any(
            c.type == "PodScheduled" and c.reason == "Unschedulable"
            for c in fleet.core.read_namespaced_pod("waiting", workload_namespace).status.conditions
            or []
        ),
        what="the other pod pending for capacity",
    )

    victim = running[0].spec.node_name
    faulted = fleet.inject(victim, FATAL_XID)

    def replacement_on_spare() -> client.V1Pod | None:
        pods = pods_of(fleet, workload_namespace, "app=llm")
        return next(
            (p for p in pods if p.spec.node_name == spare and p.status.phase == "Running"), None
        )

    replacement = eventually(
        replacement_on_spare,
        timeout=90,
        interval=0.1,
        what="the job's replacement Running on the spare",
    )
    seconds = (datetime.datetime.now(datetime.UTC) - faulted).total_seconds()
    steps = {
        "quarantined": transition(fleet, victim, "Quarantined"),
        "drained": transition(fleet, victim, "Draining"),
        "spare reserved": transition(fleet, spare, "Healthy", reason="SpareReserved"),
    }
    said = "; ".join(f"{k} +{(at - faulted).total_seconds():.2f} s" for k, at in steps.items())
    print(f"\nfault to the job's replacement Running on the spare: {seconds:.1f} s ({said})")

    other = fleet.core.read_namespaced_pod("waiting", workload_namespace)
    assert other.status.phase == "Pending"
    assert not other.spec.node_name
    tolerated = [t for t in replacement.spec.tolerations or [] if t.key == RESERVED]
    assert [(t.operator, t.value, t.effect) for t in tolerated] == [
        ("Equal", f"{workload_namespace}.llm", "NoSchedule")
    ]
    assert fleet.phase(victim) in ("Quarantined", "Draining", "Remediating", "Validating")
    eventually(
        lambda: (
            RESERVED not in fleet.taints(spare)
            and (fleet.gpunode(spare)["status"]["phase"], fleet.gpunode(spare)["status"]["reason"])
            == ("Healthy", "SpareClaimed")
        ),
        what="the reservation ended by its claim",
    )
    fleet.wait_events(spare, "SpareReserved", "ReservationTolerated", "SpareClaimed")
    assert fleet.core.read_namespaced_pod("waiting", workload_namespace).status.phase == "Pending"


def test_a_training_pod_waiting_for_capacity_gets_a_lent_spare_and_another_pod_does_not(
    fleet_factory: type[Fleet], workload_namespace: str
) -> None:
    """Three spares, one kept for displaced jobs (``spares.keepForDisplaced``): a job that
    needs three nodes where two take work waits for capacity with no node Pitcrew took
    out; a spare is lent to it and its third pod runs there. Then a pod of no training
    job waits beside the two spares left and gets neither."""
    fleet = fleet_factory(size=5)
    fleet.policy(spares={"count": 3, "keepForDisplaced": 1})
    eventually(
        lambda: (
            sorted(fleet.phase(n) for n in fleet.nodes)
            == ["Healthy", "Healthy", "Spare", "Spare", "Spare"]
        ),
        timeout=60,
        what="two nodes Healthy and three Spare",
    )
    labels = {"app": "llm", JOBSET: "llm"}
    client.AppsV1Api(fleet.api).create_namespaced_deployment(
        workload_namespace,
        {
            "metadata": {"name": "llm"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": gpu_pod_spec(fleet.group)},
            },
        },
    )
    running = eventually(
        lambda: (
            (pods := pods_of(fleet, workload_namespace, "app=llm"))
            and len(pods) == 3
            and all(p.status.phase == "Running" for p in pods)
            and pods
        ),
        timeout=90,
        what="the job's three pods Running, the third on a lent spare",
    )
    lent = [
        n
        for n in fleet.nodes
        if any(h["reason"] == "SpareLent" for h in fleet.gpunode(n)["status"]["history"])
    ]
    assert len(lent) == 1
    assert lent[0] in {p.spec.node_name for p in running}
    fleet.wait_events(lent[0], "SpareLent", "ReservationTolerated", "SpareClaimed")

    fleet.core.create_namespaced_pod(
        workload_namespace,
        {
            "metadata": {"name": "waiting", "labels": {"app": "other"}},
            "spec": gpu_pod_spec(fleet.group),
        },
    )
    eventually(
        lambda: any(
            c.type == "PodScheduled" and c.reason == "Unschedulable"
            for c in fleet.core.read_namespaced_pod("waiting", workload_namespace).status.conditions
            or []
        ),
        what="the other pod pending for capacity",
    )
    time.sleep(3)  # the spares' decisions on its event come within a round (milliseconds)
    assert [fleet.phase(n) for n in fleet.nodes].count("Spare") == 2
    other = fleet.core.read_namespaced_pod("waiting", workload_namespace)
    assert other.status.phase == "Pending"
    assert not other.spec.node_name
    assert not [t for t in other.spec.tolerations or [] if t.key == RESERVED]
