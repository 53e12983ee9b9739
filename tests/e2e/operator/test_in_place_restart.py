"""A job whose pods declare a ``RestartAllContainers`` rule has its survivors asked to
restart in place when Pitcrew takes one of its nodes out.

Three nodes run one pod each of a training job (a JobSet's labels) whose container
declares ``restartPolicyRules: [{action: RestartAllContainers, exitCodes: {operator: In,
values: [85]}}]``, beside a job of two pods that declares nothing. A fatal Xid on the
first node: the operator evicts its pods and writes ``pitcrew.dev/restart-requested``
(the drain's start) on the first job's two pods elsewhere, once each (one
``RestartRequested`` Event each, the value unchanged by the rounds that follow), and
never on the evicted pod nor on the other job's pods. The seconds from the fault to
the last request are printed.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import RESTART_REQUESTED_ANNOTATION
from support.fixtures import HealthyFleet
from support.fleet import eventually

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
JOBSET = "jobset.sigs.k8s.io/jobset-name"
RULE = {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [85]}}


def training_pod(name: str, job: str, node: str, *, in_place: bool) -> dict[str, Any]:
    train: dict[str, Any] = {
        "name": "train",
        "image": "trainer:1",
        "resources": {"limits": {"nvidia.com/gpu": "4"}},
    }
    if in_place:
        train |= {"restartPolicy": "Never", "restartPolicyRules": [RULE]}
    return {
        "metadata": {"name": name, "labels": {JOBSET: job}},
        "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [train]},
    }


def test_the_survivors_of_a_job_that_restarts_in_place_are_asked_once(
    healthy_fleet: HealthyFleet, workload_namespace: str
) -> None:
    fleet = healthy_fleet(size=3)
    core = fleet.core
    placed = {f"llm-{i}": node for i, node in enumerate(fleet.nodes)}
    for name, node in placed.items():
        core.create_namespaced_pod(
            workload_namespace, training_pod(name, "llm", node, in_place=True)
        )
    others = {"plain-0": fleet.nodes[0], "plain-1": fleet.nodes[1]}
    for name, node in others.items():
        core.create_namespaced_pod(
            workload_namespace, training_pod(name, "plain", node, in_place=False)
        )

    def running() -> bool:
        pods = core.list_namespaced_pod(workload_namespace).items
        return len(pods) == 5 and all(p.status.phase == "Running" for p in pods)

    eventually(running, timeout=60, what="the jobs' pods running")
    faulted = fleet.inject(fleet.nodes[0], FATAL_XID)

    def requests() -> dict[str, str]:
        return {
            p.metadata.name: (p.metadata.annotations or {})[RESTART_REQUESTED_ANNOTATION]
            for p in core.list_namespaced_pod(workload_namespace).items
            if RESTART_REQUESTED_ANNOTATION in (p.metadata.annotations or {})
        }

    asked = eventually(
        lambda: len(found := requests()) == 2 and found, timeout=60, what="two pods asked"
    )
    seconds = (datetime.datetime.now(datetime.UTC) - faulted).total_seconds()
    print(f"\nfatal fault to the survivors asked to restart in place: {seconds:.2f} s")
    assert set(asked) == {"llm-1", "llm-2"}
    assert len(set(asked.values())) == 1  # the drain's start, the same on each
    fleet.wait_events(fleet.nodes[0], "RestartInPlace")

    def gone(name: str) -> bool:
        try:
            pod = core.read_namespaced_pod(name, workload_namespace)
        except client.ApiException as error:
            return error.status == 404
        return pod.metadata.deletion_timestamp is not None

    eventually(lambda: gone("llm-0") and gone("plain-0"), timeout=60, what="n0's pods evicted")
    time.sleep(10)  # rounds go on deciding the node: nobody is asked again
    assert requests() == asked

    def told() -> list[client.CoreV1Event]:
        return [
            e
            for e in core.list_namespaced_event(workload_namespace).items
            if e.reason == "RestartRequested"
        ]

    events = eventually(lambda: len(found := told()) == 2 and found, what="an Event on each pod")
    assert sorted(e.involved_object.name for e in events) == ["llm-1", "llm-2"]
    assert all((e.count or 1) == 1 for e in events)
