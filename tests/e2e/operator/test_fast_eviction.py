"""A job that loses its progress on a fatal fault anyway has its pods deleted at once.

One node runs two 4-GPU training pods, each guarded by a PodDisruptionBudget that allows
no disruption: one of a job whose pods declare ``pitcrew.dev/progress-lost-on-fault:
"true"``, one of a job that declares nothing. A fatal Xid on the node: the first pod is
deleted at once (its budget not asked, a grace period of 1 s where its own is 600 s);
the second waits on its budget, as the eviction API makes it. The seconds from the
fault to the deletion are printed (docs/benchmarks.md, "Fast eviction").
"""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import PROGRESS_LOST_ANNOTATION
from support.fixtures import HealthyFleet
from support.fleet import eventually

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
JOBSET = "jobset.sigs.k8s.io/jobset-name"


def training_pod(name: str, node: str, *, lost: bool) -> dict[str, Any]:
    annotations = {PROGRESS_LOST_ANNOTATION: "true"} if lost else {}
    return {
        "metadata": {"name": name, "labels": {JOBSET: name}, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 600,
            "containers": [
                {
                    "name": "train",
                    "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "4"}},
                }
            ],
        },
    }


def test_a_fatal_fault_deletes_at_once_the_pods_of_a_job_that_loses_its_progress_anyway(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    budgets = client.PolicyV1Api(fleet.api)
    for name, lost in (("lost", True), ("kept", False)):
        fleet.core.create_namespaced_pod(workload_namespace, training_pod(name, node, lost=lost))
        budgets.create_namespaced_pod_disruption_budget(
            workload_namespace,
            {
                "metadata": {"name": name},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {JOBSET: name}}},
            },
        )

    def guarded() -> bool:
        for name in ("lost", "kept"):
            status = budgets.read_namespaced_pod_disruption_budget(name, workload_namespace).status
            if status is None or (status.current_healthy, status.disruptions_allowed) != (1, 0):
                return False
        return True

    eventually(guarded, timeout=60, what="both pods Ready under budgets that allow nothing")
    faulted = fleet.inject(node, FATAL_XID)

    def deleted(name: str) -> datetime.datetime | None:
        try:
            pod = fleet.core.read_namespaced_pod(name, workload_namespace)
        except client.ApiException as error:
            if error.status == 404:
                return datetime.datetime.now(datetime.UTC)
            raise
        return pod.metadata.deletion_timestamp and datetime.datetime.now(datetime.UTC)

    gone = eventually(lambda: deleted("lost"), timeout=30, interval=0.1, what="'lost' deleted")
    print(f"\nfatal fault to the pod deleted at once: {(gone - faulted).total_seconds():.2f} s")
    fleet.wait_events(node, "ProgressLostOnFault")
    eventually(lambda: fleet.phase(node) == "Draining", what="the node draining")
    kept = fleet.core.read_namespaced_pod("kept", workload_namespace)
    assert kept.metadata.deletion_timestamp is None  # its budget allows no eviction
    assert kept.status.phase == "Running"
