"""Job accounting at the times the job shows: a training job loses steps three times
to node faults, and the operator's wasted seconds match the steps it lost times its
step time, within one step (the accountant ticks every 5 s; the outages are shorter)."""

from __future__ import annotations

import threading
import time

from kubernetes import client

from pitcrew.dev.demo.workload import NAMESPACE, TrainingJob
from pitcrew.dev.stack import SimStack
from support.fixtures import HealthyFleet
from support.fleet import GROUP_LABEL, eventually
from support.launchers import jobset
from support.operator_metrics import gauges, job_metrics

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
STEPS_PER_SECOND = 0.25
"""Four-second steps. Each loss is placed within half a second (the API writes pod times
in whole seconds) and each resumption within a report interval (a quarter second), so
three losses stay within one step in all."""


def rank0_node(core: client.CoreV1Api, job: TrainingJob) -> str:
    pod = core.read_namespaced_pod(job.pod_name(0), NAMESPACE)
    return str(pod.spec.node_name or "")


def test_wasted_time_matches_the_steps_a_job_lost_three_times(
    healthy_fleet: HealthyFleet, pitcrew: SimStack
) -> None:
    fleet = healthy_fleet(size=4)
    job = TrainingJob(
        fleet.api,
        name=f"{fleet.group}-llm",
        size=2,
        steps_per_second=STEPS_PER_SECOND,
        checkpoint_every=3,
        node_selector={GROUP_LABEL: fleet.group},
        report_every=0.25,
        start_after="3s",  # a restart takes time, as a real one does: recovery to see
    )
    job.start()
    stop = threading.Event()
    down = [0.0]  # seconds the job ran on fewer pods than it needs, after its first start

    def train() -> None:  # the training loop, ticked every tenth of a second
        last = time.monotonic()
        while not stop.wait(0.1):
            now = time.monotonic()
            if job.state.restarts and job.state.running < job.size:
                down[0] += now - last
            job.tick(now - last)
            last = now

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    try:
        for round_ in range(3):
            # Mid-way between two checkpoints, so steps are lost.
            eventually(
                lambda: (
                    job.state.running == 2 and 1 <= job.state.step % 3 <= 2 and job.state.step >= 3
                ),
                timeout=90,
                interval=0.05,
                what="the job running between two checkpoints",
            )
            node = rank0_node(fleet.core, job)
            fleet.inject(node, FATAL_XID)
            eventually(lambda r=round_: job.state.restarts == r + 1, timeout=60, what="a restart")
            # One node out at a time: the breaker's limit on a 4-node pool.
            fleet.wait_phase(node, "Healthy", timeout=120)
        eventually(lambda: job.state.running == 2 and job.state.step % 3 >= 1, timeout=90,
                   what="the job running again")  # fmt: skip
        time.sleep(12)  # two accountant ticks see progress resumed
    finally:
        stop.set()
        trainer.join(timeout=5)
        fleet.core.delete_collection_namespaced_pod(
            NAMESPACE, label_selector=f"pitcrew.dev/job={job.name}", grace_period_seconds=0
        )
    lost = job.state.lost_steps
    assert lost > 0
    account = f"{NAMESPACE}/{job.name}"
    found = eventually(
        lambda: (
            (m := job_metrics(pitcrew, account))
            and m.get(("pitcrew_job_interruptions_total", "node-fault")) == 3
            and m
        ),
        timeout=20,
        what="three node-fault interruptions accounted",
    )
    wasted = found[("pitcrew_job_seconds_total", "wasted")]
    step = 1 / STEPS_PER_SECOND
    assert abs(wasted - lost * step) <= step, (wasted, lost, found)
    # The down time after each loss is recovery (a node fault), as long as the job saw:
    # each loss and each resumption placed within a second (whole-second pod times),
    # so a restart faster than that may read as none.
    recovery = found.get(("pitcrew_job_seconds_total", "recovery"), 0.0)
    assert down[0] >= 3 * 3  # three restarts of at least 3 s
    assert abs(recovery - down[0]) <= 3 * 1.5, (recovery, down[0], found)


def test_a_jobset_launched_job_is_accounted_under_its_own_name(
    healthy_fleet: HealthyFleet, pitcrew: SimStack, api_client: client.ApiClient, namespace: str
) -> None:
    """A JobSet's pods as its controller creates them (the JobSet's labels and their
    child Job's, no pitcrew.dev/* label): the operator accounts one job named after
    the JobSet, with the GPUs of both workers, and none per child Job."""
    fleet = healthy_fleet(size=2)
    jobset(api_client, fleet, namespace, "pretrain", fleet.nodes)
    account = f"{namespace}/pretrain"
    found = eventually(
        lambda: (m := gauges(pitcrew, "pitcrew_job_gpus")).get(account) == 16 and m,
        timeout=30,
        what="the JobSet accounted with both workers' GPUs",
    )
    assert not [job for job in found if "pretrain-workers" in job]
