"""Edges an SRE hits first: leftover marks, long names, the breaker on every path."""

from __future__ import annotations

import datetime
from dataclasses import replace

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import CORDONED_BY, SPARE_TAINT, VALIDATING_TAINT
from pitcrew.core import actions as a
from pitcrew.core import node_edits
from pitcrew.core.lifecycle import decide
from pitcrew.core.names import bounded_name, probe_name, remediation_key
from pitcrew.core.views import NodeView, Taint
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


def kinds(actions: tuple[a.Action, ...]) -> list[type]:
    return [type(x) for x in actions if not isinstance(x, a.Record)]


def uncordoned_by_a_person() -> NodeView:
    return replace(pitcrew_cordoned(node()), unschedulable=False, taints=())


def test_a_claim_left_on_a_schedulable_node_is_dropped_so_a_later_human_cordon_is_theirs() -> None:
    view = uncordoned_by_a_person()
    assert view.stale_cordon_claim
    decision = decide(state=state(view, status()), policy=policy(), fleet=fleet(), now=T0)
    (uncordon,) = [x for x in decision.actions if isinstance(x, a.Uncordon)]
    edit = node_edits.plan(view, uncordon)
    assert edit is not None
    assert edit.annotations == {CORDONED_BY: None}
    human = replace(node_edits.apply(view, edit), unschedulable=True)
    assert human.foreign_cordon  # Pitcrew will never lift it


def test_a_node_the_breaker_keeps_in_service_loses_a_leftover_pitcrew_cordon() -> None:
    leftover = pitcrew_cordoned(node(), VALIDATING_TAINT)
    decision = decide(
        state=state(leftover, status(checks=report(finding(FaultClass.FATAL)))),
        policy=policy(safety={"maxUnhealthy": 1}),
        fleet=fleet(quarantined=1),
        now=T0,
    )
    assert decision.phase is Phase.HEALTHY
    assert kinds(decision.actions) == [a.Uncordon]


def test_a_healthy_node_with_a_leftover_spare_taint_loses_it() -> None:
    tainted = NodeView(
        name="n0", created=T0, labels={}, annotations={}, taints=(Taint(SPARE_TAINT, "true"),)
    )
    decision = decide(state=state(tainted, status()), policy=policy(), fleet=fleet(), now=T0)
    assert kinds(decision.actions) == [a.RemoveTaint]


def test_a_failed_validation_waits_for_a_slot_under_max_unhealthy() -> None:
    view = pitcrew_cordoned(node(), VALIDATING_TAINT)
    probe = report(finding(FaultClass.FATAL, name="gemm"), at=LATER, suite="standard")
    decision = decide(
        state=state(view, status(Phase.VALIDATING, probe=probe)),
        policy=policy(safety={"maxUnhealthy": 1}),
        fleet=fleet(validating=1, quarantined=1),
        now=LATER,
    )
    assert decision.phase is Phase.VALIDATING
    admitted = next(c for c in decision.status.conditions if c.type == "Admitted")
    assert admitted.reason == "CircuitBreakerOpen"


def test_names_of_long_nodes_stay_unique_and_within_63_characters() -> None:
    long_a = "gpu-" + "a" * 70 + "-rack1"
    long_b = "gpu-" + "a" * 70 + "-rack2"
    keys = {
        remediation_key(long_a, 0, 1, T0),
        remediation_key(long_b, 0, 1, T0),
        remediation_key(long_a, 0, 2, T0),
        probe_name(long_a, T0),
        probe_name(long_b, T0),
    }
    assert len(keys) == 5
    assert all(len(k) <= 63 and k[-1].isalnum() for k in keys)
    assert bounded_name("short") == "short"


def test_an_application_fault_alone_takes_nothing_out() -> None:
    checks = report(finding(FaultClass.APPLICATION, name="xid", gpu=2))
    decision = decide(
        state=state(node(), status(checks=checks)), policy=policy(), fleet=fleet(), now=T0
    )
    assert decision.phase is Phase.HEALTHY
    (watched,) = decision.status.watching
    assert (watched.check, watched.gpu, watched.since, watched.escalated) == ("xid", 2, T0, False)


def test_an_application_fault_that_persists_an_hour_escalates_to_degraded() -> None:
    checks = report(finding(FaultClass.APPLICATION, name="xid", gpu=2))
    current = status(checks=checks)
    moments = [T0, T0 + datetime.timedelta(minutes=30), T0 + datetime.timedelta(minutes=61)]
    for moment in moments:
        decision = decide(state=state(node(), current), policy=policy(), fleet=fleet(), now=moment)
        current = decision.status
    assert decision.phase is Phase.SUSPECT
    assert decision.status.reason == "XidPersistent"


def test_a_watch_fault_that_clears_is_forgotten() -> None:
    failing = status(checks=report(finding(FaultClass.WATCH, name="thermal", gpu=1)))
    first = decide(state=state(node(), failing), policy=policy(), fleet=fleet(), now=T0)
    assert first.status.watching
    cleared = first.status.model_copy(update={"checks": report(at=LATER)})
    second = decide(state=state(node(), cleared), policy=policy(), fleet=fleet(), now=LATER)
    assert second.status.watching == []
