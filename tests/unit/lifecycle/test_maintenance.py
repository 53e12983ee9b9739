"""Planned maintenance: taken out before the window at the jobs' checkpoint, through
the breaker and maxConcurrentDrains, kept out during it, revalidated after."""

from __future__ import annotations

import datetime
from dataclasses import replace

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import DrainStatus, GPUNodeStatus, Phase
from pitcrew.api.vocabulary import QUARANTINE_TAINT
from pitcrew.core import actions as a
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


def test_the_breaker_and_the_drain_limit_hold_for_maintenance_too() -> None:
    due = replace(node(), maintenance=window(T0, T0 + HOUR))
    full = fleet(total=10, quarantined=1)
    refused = decided(due, status(), pool=full, safety={"maxUnhealthy": 1})
    assert refused.phase is Phase.HEALTHY
    assert any(c.type == "Admitted" and c.status == "False" for c in refused.status.conditions)
    cordoned = replace(pitcrew_cordoned(node(), QUARANTINE_TAINT), maintenance=due.maintenance)
    suspect = status(Phase.SUSPECT, reason="Maintenance", since=T0 - HOUR)
    waiting = decided(cordoned, suspect, pool=fleet(draining=1))
    assert waiting.phase is Phase.SUSPECT  # maxConcurrentDrains 1 is taken
    # Admitted, and with nothing to evict drained at once.
    assert decided(cordoned, suspect).phase is Phase.MAINTENANCE


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
