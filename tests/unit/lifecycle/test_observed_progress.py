"""A decision acts only on what it has observed: the cordon, an empty node, real progress."""

from __future__ import annotations

import datetime

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import DrainStatus, Phase, RemediationStatus
from pitcrew.api.policy import RemediationAction
from pitcrew.api.vocabulary import QUARANTINE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import decide
from pitcrew.core.views import PodView, Taint
from support.lifecycle_data import (
    T0,
    finding,
    fleet,
    node,
    pitcrew_cordoned,
    pod,
    policy,
    report,
    state,
)
from support.lifecycle_data import status as node_status

LATER = T0 + datetime.timedelta(minutes=1)
FATAL = FaultClass.FATAL


def kinds(actions: tuple[a.Action, ...]) -> list[type]:
    return [type(x) for x in actions if not isinstance(x, a.Record)]


def test_an_idle_node_is_cordoned_first_and_reset_only_once_the_cordon_is_seen() -> None:
    idle = node()
    first = decide(
        state=state(idle, node_status(checks=report(finding(FATAL)))),
        policy=policy(),
        fleet=fleet(),
        now=T0,
    )
    assert kinds(first.actions) == [a.Cordon]
    assert first.status.remediation is None
    # A pod was bound just before the cordon landed: the next decision sees it.
    busy = pitcrew_cordoned(node(pods=(pod("late-arrival"),)), QUARANTINE_TAINT)
    second = decide(state=state(busy, first.status), policy=policy(), fleet=fleet(), now=T0)
    assert second.phase is Phase.DRAINING
    assert kinds(second.actions) == [a.Evict]
    assert second.status.remediation is None


def test_a_drain_whose_cordon_was_lifted_evicts_nothing_until_it_is_back() -> None:
    uncordoned = node(pods=(pod("trainer-0"),))
    draining = node_status(
        Phase.DRAINING, checks=report(finding(FATAL)), drain=DrainStatus(started_at=T0)
    )
    decision = decide(
        state=state(uncordoned, draining), policy=policy(), fleet=fleet(draining=1), now=LATER
    )
    assert kinds(decision.actions) == [a.Cordon]


def test_in_dry_run_a_fault_never_gets_past_quarantined() -> None:
    view = node(pods=(pod("trainer-0"),))
    dry = policy(safety={"dryRun": True})
    current = node_status(checks=report(finding(FATAL)))
    for minute in range(0, 120, 10):  # two hours: far past every drain timeout
        decision = decide(
            state=state(view, current),  # the cordon never lands in a dry run
            policy=dry,
            fleet=fleet(),
            now=T0 + datetime.timedelta(minutes=minute),
            dry_run=True,
        )
        current = decision.status
        assert a.Remediate not in kinds(decision.actions)
        assert a.Evict not in kinds(decision.actions)
    assert current.phase is Phase.QUARANTINED
    assert current.remediations == []


def test_turning_dry_run_off_starts_a_real_drain_not_a_rung() -> None:
    view = node(pods=(pod("trainer-0"),))
    dry_status = decide(
        state=state(view, node_status(checks=report(finding(FATAL)))),
        policy=policy(safety={"dryRun": True}),
        fleet=fleet(),
        now=T0,
        dry_run=True,
    ).status
    hours_later = T0 + datetime.timedelta(hours=2)
    live = decide(state=state(view, dry_status), policy=policy(), fleet=fleet(), now=hours_later)
    assert kinds(live.actions) == [a.Cordon]
    cordoned = pitcrew_cordoned(view, QUARANTINE_TAINT)
    draining = decide(
        state=state(cordoned, live.status), policy=policy(), fleet=fleet(), now=hours_later
    )
    assert draining.phase is Phase.DRAINING
    assert kinds(draining.actions) == [a.Evict]  # the drain's timeout starts now, not at T0
    assert draining.status.drain is not None
    assert draining.status.drain.started_at == hours_later


def test_in_dry_run_a_timed_out_rung_neither_retries_nor_counts() -> None:
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    remediation = RemediationStatus(
        action=RemediationAction.RESET_GPU,
        fault_class=FATAL,
        step=0,
        attempt=1,
        started_at=T0,
        reference="k",
    )
    remediating = node_status(
        Phase.REMEDIATING,
        checks=report(finding(FATAL)),
        remediation=remediation,
        remediations=[T0],
    )
    decision = decide(
        state=state(cordoned, remediating),
        policy=policy(safety={"dryRun": True}),
        fleet=fleet(remediating=1),
        now=T0 + datetime.timedelta(hours=3),
        dry_run=True,
    )
    assert a.Remediate not in kinds(decision.actions)
    assert decision.status.remediations == [T0]
    assert decision.status.remediation == remediation


def stuck_terminating() -> PodView:
    return PodView("train", "stuck", "Job", terminating=True)


def test_a_pod_stuck_terminating_does_not_hold_the_drain_past_its_timeout() -> None:
    cordoned = pitcrew_cordoned(node(pods=(stuck_terminating(),)), QUARANTINE_TAINT)
    draining = node_status(
        Phase.DRAINING, checks=report(finding(FATAL)), drain=DrainStatus(started_at=T0)
    )
    within = decide(
        state=state(cordoned, draining),
        policy=policy(),
        fleet=fleet(draining=1),
        now=T0 + datetime.timedelta(minutes=29),
    )
    assert within.phase is Phase.DRAINING
    assert kinds(within.actions) == []
    past = decide(
        state=state(cordoned, draining),
        policy=policy(),
        fleet=fleet(draining=1),
        now=T0 + datetime.timedelta(minutes=31),
    )
    assert past.phase is Phase.REMEDIATING
    assert "DrainTimeoutTerminating" in {x.reason for x in past.actions}


def test_force_on_timeout_force_deletes_pods_stuck_terminating() -> None:
    cordoned = pitcrew_cordoned(node(pods=(stuck_terminating(),)), QUARANTINE_TAINT)
    draining = node_status(
        Phase.DRAINING, checks=report(finding(FATAL)), drain=DrainStatus(started_at=T0)
    )
    decision = decide(
        state=state(cordoned, draining),
        policy=policy(safety={"drain": {"onTimeout": "force"}}),
        fleet=fleet(draining=1),
        now=T0 + datetime.timedelta(minutes=31),
    )
    assert kinds(decision.actions)[:1] == [a.ForceDelete]


def test_wait_on_timeout_waits_for_pods_stuck_terminating() -> None:
    cordoned = pitcrew_cordoned(node(pods=(stuck_terminating(),)), QUARANTINE_TAINT)
    draining = node_status(
        Phase.DRAINING, checks=report(finding(FATAL)), drain=DrainStatus(started_at=T0)
    )
    decision = decide(
        state=state(cordoned, draining),
        policy=policy(safety={"drain": {"onTimeout": "wait"}}),
        fleet=fleet(draining=1),
        now=T0 + datetime.timedelta(hours=5),
    )
    assert decision.phase is Phase.DRAINING
    assert kinds(decision.actions) == []


def test_a_checkpoint_aware_drain_waits_only_for_training_pods() -> None:
    mixed = pitcrew_cordoned(
        node(pods=(pod("trainer-0"), pod("log-shipper", job=""))), QUARANTINE_TAINT
    )
    suspect = node_status(Phase.SUSPECT, checks=report(finding(FaultClass.DEGRADED)), since=T0)
    waiting = decide(
        state=state(mixed, suspect), policy=policy(), fleet=fleet(suspect=1), now=LATER
    )
    assert waiting.phase is Phase.SUSPECT  # the trainer has not checkpointed
    checkpointed = pitcrew_cordoned(
        node(pods=(pod("trainer-0", checkpoint_at=LATER), pod("log-shipper", job=""))),
        QUARANTINE_TAINT,
    )
    going = decide(
        state=state(checkpointed, suspect), policy=policy(), fleet=fleet(suspect=1), now=LATER
    )
    assert going.phase is Phase.DRAINING  # the log shipper is not waited for


def test_a_node_a_person_cordoned_is_drained_and_repaired_all_the_same() -> None:
    theirs = node(cordoned_by="kubectl")
    first = decide(
        state=state(theirs, node_status(checks=report(finding(FATAL)))),
        policy=policy(),
        fleet=fleet(),
        now=T0,
    )
    assert kinds(first.actions) == [a.Cordon]  # Pitcrew's taint; the cordon is theirs
    tainted = node(cordoned_by="kubectl", taints=(Taint(QUARANTINE_TAINT, "Xid"),))
    second = decide(state=state(tainted, first.status), policy=policy(), fleet=fleet(), now=T0)
    assert second.phase is Phase.REMEDIATING
