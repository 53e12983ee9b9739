"""Slurm kept in step with Pitcrew: drained first, its jobs waited for, resumed only
when Pitcrew drained it; a drain or DOWN made by anyone else shown and left alone."""

from __future__ import annotations

import datetime
from dataclasses import replace

import pytest

from gpuhealth.report import CheckResult, CheckStatus, FaultClass
from pitcrew.api.gpunode import ChecksStatus, DrainStatus, GPUNodeStatus, Phase, SlurmNodeStatus
from pitcrew.api.meta import Condition, ConditionStatus
from pitcrew.api.vocabulary import QUARANTINE_TAINT, VALIDATING_TAINT
from pitcrew.core import actions as a
from pitcrew.core.convert import node_view
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.views import NodeView, SlurmJobView, SlurmNodeView, SlurmUnreadable
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
DRAIN_TIMEOUT = datetime.timedelta(minutes=30)
"""The policy's default ``drain.timeout``."""
DOWN_GRACE = datetime.timedelta(minutes=5)
"""The policy's default ``slurm.downGrace``."""
UNREADABLE = SlurmUnreadable("sn-1", "slurmctld did not answer")


def slurm(
    *states: str, reason: str = "", jobs: tuple[SlurmJobView, ...] | None = None
) -> SlurmNodeView:
    return SlurmNodeView(name="sn-1", states=states, reason=reason, jobs=jobs)


def on(view: NodeView, slurm_node: SlurmNodeView | SlurmUnreadable) -> NodeView:
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


def draining(
    view: NodeView,
    *,
    started: datetime.datetime = T0,
    now: datetime.datetime = LATER,
    conditions: tuple[Condition, ...] = (),
    **spec: object,
) -> Decision:
    cordoned = pitcrew_cordoned(view, QUARANTINE_TAINT)
    current = status(
        Phase.DRAINING,
        reason="Xid",
        checks=report(finding(FaultClass.FATAL)),
        drain=DrainStatus(started_at=started),
        conditions=list(conditions),
    )
    return decided(replace(cordoned, slurm=view.slurm), current, now=now, **spec)


def test_no_remediation_while_slurm_jobs_run_or_before_the_drain_is_seen() -> None:
    for unfinished in (slurm("ALLOCATED", "DRAIN", reason="pitcrew: Xid"), slurm("IDLE")):
        decision = draining(on(node(), unfinished))
        assert decision.phase is Phase.DRAINING, unfinished
        assert not [x for x in decision.actions if isinstance(x, a.Remediate)]
        assert decision.status.drain is not None
        assert decision.status.drain.pending[0].startswith("slurm/sn-1")


def test_no_remediation_while_a_restarted_slurmctld_does_not_know_the_node_yet() -> None:
    """For a few seconds after slurmctld starts, a drained node whose job runs on is
    UNKNOWN+DRAIN (tests/unit/slurm/data/*restarted*): not idle."""
    decision = draining(on(node(), slurm("UNKNOWN", "DRAIN", reason="pitcrew: Xid")))
    assert decision.phase is Phase.DRAINING
    assert not [x for x in decision.actions if isinstance(x, a.Remediate)]


def test_the_remediation_starts_once_slurm_shows_the_node_drained_and_idle() -> None:
    decision = draining(on(node(), slurm("IDLE", "DRAIN", reason="pitcrew: Xid")))
    assert decision.phase is Phase.REMEDIATING
    assert decision.status.remediation is not None


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
    late = T0 + DRAIN_TIMEOUT + datetime.timedelta(minutes=1)
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


def test_a_job_stuck_completing_on_the_down_node_holds_the_drain_only_for_the_grace() -> None:
    """onTimeout force downs the Slurm node; a job stuck COMPLETING there (unkillable
    processes, an epilog that hangs) would hold the drain, and its slot, for ever."""
    stuck = slurm("DOWN", "COMPLETING", "DRAIN", reason="pitcrew: Xid")
    force = {"safety": {"drain": {"onTimeout": "force"}}}
    minute = datetime.timedelta(minutes=1)
    within = draining(on(node(), stuck), now=T0 + DRAIN_TIMEOUT + DOWN_GRACE - minute, **force)
    assert within.phase is Phase.DRAINING
    assert not slurm_actions(within)  # already DOWN: nothing more to ask of Slurm
    assert within.wake_at == T0 + DRAIN_TIMEOUT + DOWN_GRACE
    after = draining(
        on(node(), stuck),
        now=T0 + DRAIN_TIMEOUT + DOWN_GRACE + datetime.timedelta(seconds=1),
        **force,
    )
    assert after.phase is Phase.REMEDIATING
    (said,) = [
        x for x in after.actions if isinstance(x, a.Record) and x.reason == "DrainTimeoutSlurm"
    ]
    assert "sn-1" in said.message


def test_an_unreadable_slurm_node_holds_the_drain_as_its_jobs_would() -> None:
    """Unreadable is not "no Slurm": only the slurmd pod runs there, and a drain that
    ended at once would reset the node under Slurm's running jobs."""
    decision = draining(on(node(), UNREADABLE))
    assert decision.phase is Phase.DRAINING
    assert decision.status.drain is not None
    assert decision.status.drain.pending == ["slurm/sn-1 (not readable)"]
    assert not [x for x in decision.actions if isinstance(x, a.Remediate)]
    assert not slurm_actions(decision)
    (condition,) = [c for c in decision.status.conditions if c.type == "SlurmReadable"]
    assert (condition.status, condition.reason) == (ConditionStatus.FALSE, "SlurmUnreadable")
    assert "slurmctld did not answer" in condition.message
    assert [x.reason for x in decision.actions if isinstance(x, a.Record)] == ["SlurmUnreadable"]
    again = draining(on(node(), UNREADABLE), conditions=tuple(decision.status.conditions))
    assert not [x for x in again.actions if isinstance(x, a.Record)]  # said once


@pytest.mark.parametrize(
    ("on_timeout", "at_timeout", "after_grace"),
    [
        ("escalate", Phase.REMEDIATING, Phase.REMEDIATING),
        ("force", Phase.DRAINING, Phase.REMEDIATING),
        ("wait", Phase.DRAINING, Phase.DRAINING),
    ],
)
def test_an_unreadable_slurm_node_past_the_drain_timeout_follows_on_timeout(
    on_timeout: str, at_timeout: Phase, after_grace: Phase
) -> None:
    spec = {"safety": {"drain": {"onTimeout": on_timeout}}}
    second = datetime.timedelta(seconds=1)
    timed_out = draining(on(node(), UNREADABLE), now=T0 + DRAIN_TIMEOUT + second, **spec)
    assert timed_out.phase is at_timeout
    assert not slurm_actions(timed_out)  # no DOWN on a guess
    later = T0 + DRAIN_TIMEOUT + DOWN_GRACE + second
    assert draining(on(node(), UNREADABLE), now=later, **spec).phase is after_grace


def test_a_failing_node_of_unknown_slurm_state_is_taken_out_without_touching_slurm() -> None:
    broken = status(Phase.HEALTHY, checks=report(finding(FaultClass.FATAL), at=LATER))
    decision = decided(on(node(), UNREADABLE), broken)
    assert decision.phase is Phase.QUARANTINED
    assert not slurm_actions(decision)


def test_a_node_of_unknown_slurm_state_is_never_held_as_a_spare_or_probed() -> None:
    spec = {"spares": {"count": 1}, "validation": {"periodic": {"enabled": True}}}
    decision = decided(replace(on(node(), UNREADABLE), gpus=8), status(Phase.HEALTHY), **spec)
    assert decision.phase is Phase.HEALTHY
    assert not [x for x in decision.actions if isinstance(x, a.StartProbe)]


def test_an_opted_out_node_gets_pitcrews_slurm_drain_undone_and_no_one_elses() -> None:
    opted_out = replace(node(), labels={"pitcrew.dev/managed": "false"})
    ours = decided(
        on(opted_out, slurm("IDLE", "DRAIN", reason="pitcrew: Xid")), status(Phase.QUARANTINED)
    )
    assert ours.phase is Phase.EXCLUDED
    assert [x.state for x in slurm_actions(ours)] == ["RESUME"]
    theirs = decided(
        on(opted_out, slurm("IDLE", "DRAIN", reason="ticket 9")), status(Phase.QUARANTINED)
    )
    assert not slurm_actions(theirs)


def test_a_policy_that_stops_draining_through_slurm_undoes_pitcrews_drain() -> None:
    remembered = SlurmNodeStatus(
        node="sn-1", state="IDLE+DRAIN", reason="pitcrew: Xid", drained_by="pitcrew"
    )
    current = status(Phase.HEALTHY, slurm=remembered)
    plain = policy()
    view = on(node(), slurm("IDLE", "DRAIN", reason="pitcrew: Xid"))
    resumed = decide(state=state(view, current), policy=plain, fleet=fleet(), now=LATER)
    assert [x.state for x in slurm_actions(resumed)] == ["RESUME"]
    assert resumed.status.slurm == remembered  # forgotten once the drain is seen gone
    gone = decide(
        state=state(on(node(), slurm("IDLE")), current), policy=plain, fleet=fleet(), now=LATER
    )
    assert not slurm_actions(gone)
    assert gone.status.slurm is None
    unknown = decide(
        state=state(on(node(), UNREADABLE), current), policy=plain, fleet=fleet(), now=LATER
    )
    assert unknown.status.slurm == remembered  # tried again once Slurm can be read
