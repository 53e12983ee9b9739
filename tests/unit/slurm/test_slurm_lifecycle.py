"""Slurm kept in step with Pitcrew: drained first, its jobs waited for, resumed only
when Pitcrew drained it; a drain or DOWN made by anyone else shown and left alone."""

from __future__ import annotations

import datetime
from dataclasses import replace

import pytest

from gpuhealth.report import CheckResult, CheckStatus, FaultClass
from pitcrew.api.gpunode import ChecksStatus, DrainStatus, GPUNodeStatus, Phase
from pitcrew.api.vocabulary import QUARANTINE_TAINT, VALIDATING_TAINT
from pitcrew.core import actions as a
from pitcrew.core.convert import node_view
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.views import NodeView, SlurmJobView, SlurmNodeView
from support.lifecycle_data import (
    T0,
    finding,
    fleet,
    node,
    pitcrew_cordoned,
    policy,
    report,
    state,
    status,
)

LATER = T0 + datetime.timedelta(minutes=1)
SLURM = policy(slurm={"enabled": True})


def slurm(
    *states: str, reason: str = "", jobs: tuple[SlurmJobView, ...] | None = None
) -> SlurmNodeView:
    return SlurmNodeView(name="sn-1", states=states, reason=reason, jobs=jobs)


def on(view: NodeView, slurm_node: SlurmNodeView) -> NodeView:
    return replace(view, slurm=slurm_node)


def decided(
    view: NodeView, current: GPUNodeStatus, *, now: datetime.datetime = LATER, **spec: object
) -> Decision:
    chosen = policy(slurm={"enabled": True}, **spec) if spec else SLURM
    return decide(state=state(view, current), policy=chosen, fleet=fleet(), now=now)


def slurm_actions(decision: Decision) -> list[a.SetSlurmState]:
    return [x for x in decision.actions if isinstance(x, a.SetSlurmState)]


def test_a_failing_node_is_drained_in_slurm_with_pitcrews_reason() -> None:
    broken = status(Phase.HEALTHY, checks=report(finding(FaultClass.FATAL), at=LATER))
    decision = decided(on(node(), slurm("MIXED")), broken)
    assert decision.phase is Phase.QUARANTINED
    (drain,) = slurm_actions(decision)
    assert (drain.node, drain.state) == ("sn-1", "DRAIN")
    assert drain.slurm_reason.startswith("pitcrew: ")
    assert decision.status.slurm is not None
    assert decision.status.slurm.state == "MIXED"


def draining(view: NodeView, *, started: datetime.datetime = T0) -> Decision:
    cordoned = pitcrew_cordoned(view, QUARANTINE_TAINT)
    current = status(
        Phase.DRAINING,
        reason="Xid",
        checks=report(finding(FaultClass.FATAL)),
        drain=DrainStatus(started_at=started),
    )
    return decided(replace(cordoned, slurm=view.slurm), current)


def test_no_remediation_while_slurm_jobs_run_or_before_the_drain_is_seen() -> None:
    for unfinished in (slurm("ALLOCATED", "DRAIN", reason="pitcrew: Xid"), slurm("IDLE")):
        decision = draining(on(node(), unfinished))
        assert decision.phase is Phase.DRAINING, unfinished
        assert not [x for x in decision.actions if isinstance(x, a.Remediate)]
        assert decision.status.drain is not None
        assert decision.status.drain.pending[0].startswith("slurm/sn-1")


def test_the_remediation_starts_once_slurm_shows_the_node_drained_and_idle() -> None:
    decision = draining(on(node(), slurm("IDLE", "DRAIN", reason="pitcrew: Xid")))
    assert decision.phase is Phase.REMEDIATING
    assert [x for x in decision.actions if isinstance(x, a.Remediate)]


def test_the_slurmd_pod_is_never_evicted_its_jobs_are_drained_instead() -> None:
    slurmd_pod = {
        "metadata": {
            "namespace": "slurm",
            "name": "compute-0",
            "ownerReferences": [{"kind": "NodeSet", "controller": True}],
        },
        "status": {"phase": "Running"},
    }
    raw = {"metadata": {"name": "gpu-node-0001"}, "spec": {}}
    view = node_view(raw, [slurmd_pod], slurmd="slurm/compute-0")
    assert view.pods[0].slurmd
    assert not view.workload
    decision = draining(on(view, slurm("IDLE", "DRAIN", reason="pitcrew: Xid")))
    assert not [x for x in decision.actions if isinstance(x, a.Evict)]
    assert decision.phase is Phase.REMEDIATING


@pytest.mark.parametrize(("on_timeout", "expected"), [("force", "DOWN"), ("escalate", None)])
def test_slurm_jobs_past_the_drain_timeout(on_timeout: str, expected: str | None) -> None:
    view = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    view = replace(view, slurm=slurm("ALLOCATED", "DRAIN", reason="pitcrew: Xid"))
    current = status(
        Phase.DRAINING,
        reason="Xid",
        checks=report(finding(FaultClass.FATAL)),
        drain=DrainStatus(started_at=T0),
    )
    late = T0 + datetime.timedelta(hours=2)
    decision = decided(view, current, now=late, safety={"drain": {"onTimeout": on_timeout}})
    if expected:
        (down,) = slurm_actions(decision)
        assert (down.state, down.reason) == ("DOWN", "DrainTimeoutForce")
        assert decision.phase is Phase.DRAINING  # Slurm ends the jobs; then the rung
    else:
        assert decision.phase is Phase.REMEDIATING
        assert any(x.reason == "DrainTimeoutEscalate" for x in decision.actions)


def passed_validation(slurm_node: SlurmNodeView) -> Decision:
    probe = ChecksStatus(
        report_time=LATER,
        backend="nvml",
        suite="standard",
        results=[CheckResult(name="gemm", status=CheckStatus.PASS, gpu=g) for g in range(8)],
    )
    view = replace(pitcrew_cordoned(node(), VALIDATING_TAINT), gpus=8, slurm=slurm_node)
    return decided(view, status(Phase.VALIDATING, probe=probe, probe_attempts=1))


def test_back_in_service_the_node_is_resumed_in_slurm_only_if_pitcrew_drained_it() -> None:
    ours = passed_validation(slurm("IDLE", "DRAIN", reason="pitcrew: Xid"))
    assert ours.phase is Phase.HEALTHY
    (resume,) = slurm_actions(ours)
    assert resume.state == "RESUME"
    assert ours.status.slurm is not None
    assert ours.status.slurm.drained_by == "pitcrew"
    for person in (
        slurm("IDLE", "DRAIN", reason="swap the NIC (ticket 4411)"),
        slurm("DOWN", reason="Not responding"),
    ):
        theirs = passed_validation(person)
        assert theirs.phase is Phase.HEALTHY
        assert not slurm_actions(theirs)
        assert theirs.status.slurm is not None
        assert theirs.status.slurm.drained_by == "other"
        assert theirs.status.slurm.reason == person.reason


def test_a_node_down_for_someone_elses_reason_is_never_drained_over() -> None:
    """Draining over it would replace the person's reason with Pitcrew's, and Pitcrew
    would later resume a node a person set DOWN."""
    broken = status(Phase.HEALTHY, checks=report(finding(FaultClass.FATAL), at=LATER))
    decision = decided(on(node(), slurm("DOWN", reason="bad cable, ticket 17")), broken)
    assert decision.phase is Phase.QUARANTINED
    assert not slurm_actions(decision)


def test_pitcrews_own_down_gets_a_drain_on_top_so_slurm_never_returns_it_unvalidated() -> None:
    decision = draining(on(node(), slurm("DOWN", reason="pitcrew: Xid")))
    (drain,) = slurm_actions(decision)
    assert drain.state == "DRAIN"


def test_a_suspect_nodes_drain_waits_for_its_slurm_jobs_checkpoint() -> None:
    degraded = report(finding(FaultClass.DEGRADED, name="ecc-sbe"), at=T0)
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    current = status(Phase.SUSPECT, reason="EccSbe", checks=degraded)
    for jobs, drains in (
        (None, False),  # not read yet: no evidence
        ((SlurmJobView("41", checkpoint_at=T0 - datetime.timedelta(minutes=5)),), False),
        ((SlurmJobView("41", checkpoint_at=LATER),), True),
    ):
        view = replace(cordoned, slurm=slurm("MIXED", "DRAIN", reason="pitcrew: ecc", jobs=jobs))
        decision = decided(view, current)
        assert (decision.phase is Phase.DRAINING) is drains, jobs


def test_a_busy_slurm_node_is_never_taken_as_a_spare_and_a_spare_is_drained() -> None:
    busy = decide(
        state=state(on(node(), slurm("ALLOCATED")), status(Phase.HEALTHY)),
        policy=policy(slurm={"enabled": True}, spares={"count": 1}),
        fleet=fleet(),
        now=LATER,
    )
    assert busy.phase is Phase.HEALTHY
    idle = decide(
        state=state(on(node(), slurm("IDLE")), status(Phase.HEALTHY)),
        policy=policy(slurm={"enabled": True}, spares={"count": 1}),
        fleet=fleet(),
        now=LATER,
    )
    assert idle.phase is Phase.SPARE
    (drain,) = slurm_actions(idle)
    assert drain.slurm_reason == "pitcrew: HeldAsSpare"
    released = decide(
        state=state(
            on(replace(node(), taints=()), slurm("IDLE", "DRAIN", reason="pitcrew: HeldAsSpare")),
            status(Phase.SPARE),
        ),
        policy=policy(slurm={"enabled": True}, spares={"count": 1}),
        fleet=fleet(spares=("gpu-node-0001",)),
        now=LATER,
    )
    assert released.phase is Phase.HEALTHY
    assert [x.state for x in slurm_actions(released)] == ["RESUME"]


def test_a_node_in_slurms_service_gets_no_periodic_probe_pod() -> None:
    """Slurm, which knows nothing of a probe pod, would start a job on the same GPUs."""
    spec = {"validation": {"periodic": {"enabled": True}}}
    view = replace(node(), gpus=8)
    plain = decide(state=state(view, status()), policy=policy(**spec), fleet=fleet(), now=LATER)
    assert [x for x in plain.actions if isinstance(x, a.StartProbe)]
    in_slurm = decide(
        state=state(on(view, slurm("IDLE")), status()),
        policy=policy(slurm={"enabled": True}, **spec),
        fleet=fleet(),
        now=LATER,
    )
    assert not [x for x in in_slurm.actions if isinstance(x, a.StartProbe)]


def test_without_a_slurm_view_nothing_is_done_in_slurm() -> None:
    broken = status(Phase.HEALTHY, checks=report(finding(FaultClass.FATAL), at=LATER))
    decision = decided(node(), broken)
    assert not slurm_actions(decision)
    assert decision.status.slurm is None
