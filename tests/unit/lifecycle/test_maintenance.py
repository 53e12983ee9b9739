"""Planned maintenance: taken out before the window at the jobs' checkpoint, through
the breaker and maxConcurrentDrains, kept out during it, revalidated after."""

from __future__ import annotations

import datetime
from dataclasses import replace

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import DrainStatus, GPUNodeStatus, Phase, RemediationStatus
from pitcrew.api.policy import RemediationAction
from pitcrew.api.vocabulary import QUARANTINE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.fleet import summarize
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.views import FleetView, MaintenanceView, NodeView
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
    status,
)

HOUR = datetime.timedelta(hours=1)
LEAD = {"safety": {"drain": {"checkpointMaxDelay": "30m"}}}


def window(start: datetime.datetime, end: datetime.datetime | None) -> MaintenanceView:
    return MaintenanceView("MaintenanceWindow/fw-550", start, end, reason="firmware 550.90")


def decided(
    view: NodeView,
    current: GPUNodeStatus,
    *,
    now: datetime.datetime = T0,
    pool: FleetView | None = None,
    **spec: object,
) -> Decision:
    return decide(
        state=state(view, current),
        policy=policy(**{**LEAD, **spec}),
        fleet=pool or fleet(),
        now=now,
    )


def test_a_node_is_taken_out_only_within_the_lead_before_its_window() -> None:
    early = replace(node(), maintenance=window(T0 + HOUR, T0 + 3 * HOUR))
    assert decided(early, status()).phase is Phase.HEALTHY
    due = replace(node(), maintenance=window(T0 + datetime.timedelta(minutes=20), T0 + HOUR))
    decision = decided(due, status(), pool=fleet(spares=("spare-1",)))
    assert decision.phase is Phase.SUSPECT
    assert decision.status.reason == "Maintenance"
    assert "MaintenanceWindow/fw-550" in decision.status.message
    assert [x for x in decision.actions if isinstance(x, a.Cordon)]
    assert [x for x in decision.actions if isinstance(x, a.ReleaseSpare)]


def test_maintenance_has_a_budget_of_its_own_and_the_drain_limit_holds() -> None:
    due = replace(node(), maintenance=window(T0, T0 + HOUR))
    # A broken node out of service does not hold the window back ...
    faulty = decided(due, status(), pool=fleet(total=10, quarantined=1), safety={"maxUnhealthy": 1})
    assert faulty.phase is Phase.SUSPECT
    # ... but the window's own budget (the pool's maxUnhealthy) does.
    full = fleet(total=10, maintenance=1)
    refused = decided(due, status(), pool=full, safety={"maxUnhealthy": 1})
    assert refused.phase is Phase.HEALTHY
    (admitted,) = [c for c in refused.status.conditions if c.type == "Admitted"]
    assert (admitted.status, admitted.reason) == ("False", "MaintenanceLimit")
    assert not summarize(refused.status).refused  # not a failing node the breaker holds
    leaving = replace(full, phases={Phase.HEALTHY: 9, Phase.SUSPECT: 1}, leaving_for_maintenance=1)
    again = decided(due, status(), pool=leaving, safety={"maxUnhealthy": 1})
    assert again.phase is Phase.HEALTHY  # a node on its way out spends the budget too
    cordoned = replace(pitcrew_cordoned(node(), QUARANTINE_TAINT), maintenance=due.maintenance)
    suspect = status(Phase.SUSPECT, reason="Maintenance", since=T0 - HOUR)
    windows_draining = replace(fleet(draining=1), draining_for_maintenance=1)
    waiting = decided(cordoned, suspect, pool=windows_draining)
    assert waiting.phase is Phase.SUSPECT  # maxConcurrentDrains 1 is taken by a window
    # Admitted, and with nothing to evict drained at once.
    assert decided(cordoned, suspect).phase is Phase.MAINTENANCE


def test_a_windows_drain_never_takes_a_faults_drain_slot() -> None:
    """maxConcurrentDrains 1, and one node draining for a window: a broken node,
    cordoned and waiting, drains now; a second window's node waits for the window's
    slot, and a fault's drain does not take that one either."""
    window_draining = replace(fleet(draining=1), draining_for_maintenance=1)
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    broken = status(Phase.QUARANTINED, reason="Xid", checks=report(finding(FaultClass.FATAL)))
    busy = replace(cordoned, pods=(pod("trainer-0"),))
    assert decided(busy, broken, pool=window_draining).phase is Phase.DRAINING
    due = replace(busy, maintenance=window(T0, T0 + HOUR))
    suspect = status(Phase.SUSPECT, reason="Maintenance", since=T0 - HOUR)
    held = decided(due, suspect, pool=window_draining)
    assert held.phase is Phase.SUSPECT
    (admitted,) = [c for c in held.status.conditions if c.type == "Admitted"]
    assert "for maintenance" in admitted.message
    assert decided(due, suspect, pool=fleet(draining=1)).phase is Phase.DRAINING


def test_a_window_never_refuses_a_broken_node() -> None:
    # maxUnhealthy 1, and one node already drained for a window, one leaving for it.
    pool = replace(fleet(total=10, maintenance=1, suspect=1), leaving_for_maintenance=1)
    broken = status(checks=report(finding(FaultClass.FATAL)))
    decision = decided(node(), broken, pool=pool, safety={"maxUnhealthy": 1})
    assert decision.phase is Phase.QUARANTINED
    assert not summarize(decision.status).refused


def test_a_window_is_not_held_by_the_storm_cooldown() -> None:
    due = replace(node(), maintenance=window(T0, T0 + HOUR))
    view = decide(
        state=state(due, status()),
        policy=replace(policy(**LEAD), cooldown_until=T0 + HOUR),
        fleet=fleet(),
        now=T0,
    )
    assert view.phase is Phase.SUSPECT


def test_the_drain_waits_for_the_jobs_checkpoint_up_to_the_lead() -> None:
    taken_out = T0 - datetime.timedelta(minutes=5)
    suspect = status(Phase.SUSPECT, reason="Maintenance", since=taken_out)
    upcoming = window(T0 + datetime.timedelta(minutes=25), T0 + HOUR)
    busy = pitcrew_cordoned(node(pods=(pod("trainer-0"),)), QUARANTINE_TAINT)
    busy = replace(busy, pods=(pod("trainer-0"),), maintenance=upcoming)
    assert decided(busy, suspect).phase is Phase.SUSPECT
    saved = replace(busy, pods=(pod("trainer-0", checkpoint_at=T0),))
    assert decided(saved, suspect).phase is Phase.DRAINING


def test_a_drained_node_waits_out_the_window_then_is_revalidated() -> None:
    during = window(T0 - HOUR, T0 + HOUR)
    cordoned = replace(pitcrew_cordoned(node(), QUARANTINE_TAINT), maintenance=during, gpus=8)
    draining = status(Phase.DRAINING, reason="Maintenance", drain=DrainStatus(started_at=T0))
    drained = decided(cordoned, draining)
    assert drained.phase is Phase.MAINTENANCE
    assert not [x for x in drained.actions if isinstance(x, a.Remediate)]
    # A finding while people work on it is not acted on.
    broken = report(finding(FaultClass.FATAL))
    kept = decided(cordoned, status(Phase.MAINTENANCE, reason="Maintenance", checks=broken))
    assert kept.phase is Phase.MAINTENANCE
    assert not kept.actions
    ended = replace(cordoned, maintenance=None)
    after = decided(ended, status(Phase.MAINTENANCE, reason="Maintenance"), now=T0 + 2 * HOUR)
    assert after.phase is Phase.VALIDATING
    assert after.status.reason == "MaintenanceEnded"
    assert [x for x in after.actions if isinstance(x, a.StartProbe)]


def test_a_window_withdrawn_before_the_drain_returns_the_node() -> None:
    cordoned = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    suspect = status(Phase.SUSPECT, reason="Maintenance", since=T0)
    decision = decided(cordoned, suspect)
    assert decision.phase is Phase.HEALTHY
    assert [x for x in decision.actions if isinstance(x, a.Uncordon)]


def test_a_node_maintenance_without_an_end_holds_the_node_until_deleted() -> None:
    medik8s = MaintenanceView("NodeMaintenance/nm-1", T0 - HOUR, None, "replace PSU")
    cordoned = replace(pitcrew_cordoned(node(), QUARANTINE_TAINT), maintenance=medik8s)
    later = T0 + 100 * HOUR
    held = decided(cordoned, status(Phase.MAINTENANCE, reason="Maintenance"), now=later)
    assert held.phase is Phase.MAINTENANCE


LADDER = {
    "remediation": {
        "ladders": {
            "fatal": [
                {"action": "reset-gpu", "timeout": "10m"},
                {"action": "reboot", "timeout": "30m"},
            ]
        }
    }
}


def remediating_since(started: datetime.datetime) -> GPUNodeStatus:
    """A fatal node on the first rung (reset-gpu), started at ``started``."""
    return status(
        Phase.REMEDIATING,
        reason="RemediationResetGpu",
        since=started,
        checks=report(finding(FaultClass.FATAL)),
        remediation=RemediationStatus(
            action=RemediationAction.RESET_GPU,
            fault_class=FaultClass.FATAL,
            step=0,
            attempt=1,
            started_at=started,
            reference="fix-1",
        ),
    )


def test_a_remediating_node_climbs_no_further_inside_an_active_window() -> None:
    # The reset timed out: outside a window the next rung (a BMC reboot) would start.
    broken = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    timed_out = remediating_since(T0 - HOUR)
    outside = decided(broken, timed_out, **LADDER)
    assert [x.action for x in outside.actions if isinstance(x, a.Remediate)] == ["reboot"]
    inside = replace(broken, maintenance=window(T0 - datetime.timedelta(minutes=5), T0 + HOUR))
    held = decided(inside, timed_out, **LADDER)
    assert held.phase is Phase.MAINTENANCE
    assert not [x for x in held.actions if isinstance(x, a.Remediate)]
    assert "MaintenanceWindow/fw-550" in held.status.message
    assert held.status.remediation is None
    # When the window ends it is revalidated; a fault still there starts the ladder over.
    ended = replace(broken, maintenance=None)
    after = decided(ended, held.status, now=T0 + 2 * HOUR, **LADDER)
    assert after.phase is Phase.VALIDATING


def test_a_window_not_yet_begun_stops_nothing_and_is_woken_for() -> None:
    broken = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    later = replace(broken, maintenance=window(T0 + HOUR, T0 + 2 * HOUR))
    slow = {"remediation": {"ladders": {"fatal": [{"action": "reboot", "timeout": "3h"}]}}}
    running = decided(later, remediating_since(T0 - datetime.timedelta(minutes=5)), **slow)
    assert running.phase is Phase.REMEDIATING
    assert running.wake_at == T0 + HOUR  # the window's start, before the rung's timeout


def test_a_node_drained_for_a_fault_starts_no_rung_inside_a_window() -> None:
    during = window(T0 - HOUR, T0 + HOUR)
    cordoned = replace(pitcrew_cordoned(node(), QUARANTINE_TAINT), maintenance=during)
    draining = status(
        Phase.DRAINING,
        reason="Xid79",
        checks=report(finding(FaultClass.FATAL)),
        drain=DrainStatus(started_at=T0),
    )
    drained = decided(cordoned, draining, **LADDER)
    assert drained.phase is Phase.MAINTENANCE
    assert not [x for x in drained.actions if isinstance(x, a.Remediate)]


def test_a_node_maintenance_is_active_whatever_the_operators_clock_says() -> None:
    # Its start is its creation time, the apiserver's; the operator's clock runs behind.
    medik8s = MaintenanceView("NodeMaintenance/nm-1", T0 + datetime.timedelta(minutes=2), None)
    cordoned = replace(pitcrew_cordoned(node(), QUARANTINE_TAINT), maintenance=medik8s)
    held = decided(cordoned, remediating_since(T0 - HOUR), **LADDER)
    assert held.phase is Phase.MAINTENANCE


def test_a_later_window_does_not_keep_a_node_out_between_windows() -> None:
    # Its window ended; the next one over it starts in a week.
    next_week = window(T0 + 7 * 24 * HOUR, T0 + 7 * 24 * HOUR + HOUR)
    cordoned = replace(pitcrew_cordoned(node(), QUARANTINE_TAINT), maintenance=next_week)
    after = decided(cordoned, status(Phase.MAINTENANCE, reason="Maintenance"))
    assert after.phase is Phase.VALIDATING
    assert after.status.reason == "MaintenanceEnded"
    # Back to back (the next one starts within the lead): it stays out.
    soon = replace(cordoned, maintenance=window(T0 + datetime.timedelta(minutes=10), T0 + HOUR))
    assert decided(soon, status(Phase.MAINTENANCE, reason="Maintenance")).phase is (
        Phase.MAINTENANCE
    )
