"""Training jobs as people launch them: a JobSet's pods (no ``pitcrew.dev/*`` label),
a training process with Pitcrew's framework hook and nothing else. The hook writes
to the real apiserver with the pod's environment and the pod's own credentials (its
ServiceAccount's token bound to the pod, with the Role and admission policy of
``pitcrew install --training-namespace``: no admin), as it would in the pod; the
operator accounts the job, drains a failing node of it at the checkpoint the hook
reported, and takes out the node that its ranks' step times name the straggler."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client

from pitcrew.dev.stack import SimStack
from support.fixtures import HealthyFleet
from support.fleet import Fleet, eventually
from support.launchers import jobset
from support.operator_metrics import gauges, job_metrics, leader_job_seconds
from support.trainers import pod_credentials, train


def reason(fleet: Fleet, node: str) -> tuple[str, str]:
    status: dict[str, Any] = fleet.gpunode(node).get("status") or {}
    return str(status.get("phase", "")), str(status.get("reason", ""))


def test_a_lightning_job_launched_by_jobset_is_accounted_and_drained_at_its_checkpoint(
    healthy_fleet: HealthyFleet,
    pitcrew: SimStack,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    fleet = healthy_fleet(size=3, safety={"drain": {"checkpointMaxDelay": "10m"}})
    rank0, _ = jobset(api_client, fleet, namespace, "finetune", fleet.nodes[:2])
    own = pod_credentials(api_client, namespace, rank0, tmp_path)
    trainer = train(own, namespace, rank0, fleet.nodes[0], "lightning", "600")
    try:
        job = f"{namespace}/finetune"
        eventually(
            lambda: (
                job_metrics(pitcrew, job).get(("pitcrew_job_seconds_total", "productive"), 0) > 0
            ),
            timeout=60,
            what="the job's productive time accounted from the hook's reports",
        )
        # MFU from the FLOPs Lightning's batch was counted at, over the nodes' H100 peak.
        eventually(
            lambda: gauges(pitcrew, "pitcrew_job_mfu_ratio").get(job, 0) > 0,
            timeout=90,  # the FLOPs come with a later report than the first steps
            what="the job's MFU from the FLOPs per step the hook counted",
        )
        assert gauges(pitcrew, "pitcrew_job_gpus").get(job) == 16
        # A degraded fault on rank 1's node: Suspect, then drained once the job has
        # checkpointed, which only rank 0's report says (no pod carries checkpoint-at).
        fleet.inject(fleet.nodes[1], [{"type": "nvlink-down", "gpu": 2, "link": 3}])
        fleet.wait_phase(fleet.nodes[1], "Suspect", timeout=30)
        fleet.wait_phase(fleet.nodes[1], "Draining", "Remediating", "Validating", timeout=60)
        assert trainer.running(), f"the drain waited past the training run: {trainer.said()}"
    finally:
        trainer.stop()


def test_the_rank_its_job_names_slowest_has_its_node_taken_out_as_a_straggler(
    healthy_fleet: HealthyFleet,
    pitcrew: SimStack,
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    fleet = healthy_fleet(
        size=3,
        stragglers={"slowerThanMedianPercent": 20, "consecutiveReports": 2},
        safety={"drain": {"checkpointMaxDelay": "10m"}},
    )
    rank0, _ = jobset(api_client, fleet, namespace, "pretrain", fleet.nodes[:2])
    fast, slow = fleet.nodes[:2]
    own = pod_credentials(api_client, namespace, rank0, tmp_path)
    trainer = train(own, namespace, rank0, fast, "ranks", "1500", fast, slow, "0.03")
    try:
        eventually(
            lambda: reason(fleet, slow) == ("Suspect", "Straggler") or not trainer.running(),
            timeout=90,
            what=f"{slow} Suspect as the job's straggler (now {reason(fleet, slow)})",
        )
        assert trainer.running(), trainer.said()
        # Drained at the job's next checkpoint (every 50 steps, a few seconds), not at
        # the 10-minute limit; the fast node stays in service.
        fleet.wait_phase(slow, "Draining", "Remediating", "Validating", timeout=60)
        assert fleet.phase(fast) == "Healthy"
        fleet.wait_events(slow, "Straggler")
        told = [e.message for e in fleet.events(slow) if e.reason == "Straggler"]
        assert any(f"job {namespace}/pretrain" in m for m in told), told
    finally:
        trainer.stop()
    # Then like any degraded fault: the ladder's reset, a validation, back in service
    # (nothing is wrong with the simulated GPU: the slowness was the training's).
    back = fleet.wait_phase(slow, "Healthy", "Spare", timeout=180)["status"]["phase"]
    history = fleet.history(slow)
    since = len(history) - 1 - history[::-1].index("Suspect")
    assert history[since:] == ["Suspect", "Draining", "Remediating", "Validating", back], history


def test_a_jobset_declaring_more_workers_than_run_is_waiting_for_them(
    fleet_factory: type[Fleet],
    pitcrew: SimStack,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """The size comes from the JobSet itself, read with the chart's ClusterRole
    (``rbac.readJobSizes``): three GPU workers declared, two running, no label says
    so. The job waits; with the size taken from its pods it would be training."""
    fleet = fleet_factory(size=3)
    fleet.policy()
    jobset(api_client, fleet, namespace, "short", fleet.nodes[:2], declared=3)
    job = f"{namespace}/short"

    def waiting_only() -> bool:
        """Over 12 s of one leader's counters, the job waits and does not train. (A
        leader that takes over meanwhile counts its first tick by the pods, until its
        own read of the JobSet answers: the window starts again.)"""
        leader, before = leader_job_seconds(pitcrew, job)
        time.sleep(12)
        now_leader, after = leader_job_seconds(pitcrew, job)
        waited = after.get("waiting", 0.0) - before.get("waiting", 0.0)
        trained = after.get("productive", 0.0) - before.get("productive", 0.0)
        return bool(leader) and leader == now_leader and waited >= 10 and trained == 0

    eventually(waiting_only, timeout=90, what="the job waiting for its third worker, not training")
