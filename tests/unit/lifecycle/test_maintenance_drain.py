"""A drain for a maintenance window lasts only as long as the window calls for it."""

from __future__ import annotations

import datetime
from dataclasses import replace

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import DrainStatus, Phase
from pitcrew.api.vocabulary import QUARANTINE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.views import MaintenanceView, NodeView
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
WINDOW = MaintenanceView("MaintenanceWindow/fw-550", T0 + HOUR, T0 + 3 * HOUR, "firmware")
DRAINING = status(Phase.DRAINING, reason="Maintenance", drain=DrainStatus(started_at=T0))


def busy(window: MaintenanceView | None) -> NodeView:
    cordoned = pitcrew_cordoned(node(pods=(pod("trainer-0"),)), QUARANTINE_TAINT)
    return replace(cordoned, pods=(pod("trainer-0"),), maintenance=window)


def decided(view: NodeView, **fields: object) -> Decision:
    current = DRAINING.model_copy(update=fields)
    return decide(
        state=state(view, current),
        policy=policy(safety={"drain": {"checkpointMaxDelay": "2h"}}),
        fleet=fleet(draining=1),
        now=T0,
    )


def test_a_maintenance_drain_evicts_while_its_window_is_due() -> None:
    decision = decided(busy(WINDOW))
    assert decision.phase is Phase.DRAINING
    assert [x for x in decision.actions if isinstance(x, a.Evict)]


def test_deleting_the_window_mid_drain_stops_the_evictions_and_returns_the_node() -> None:
    decision = decided(busy(None))
    assert decision.phase is Phase.HEALTHY
    assert decision.status.reason == "MaintenanceWithdrawn"
    assert decision.status.drain is None
    assert not [x for x in decision.actions if isinstance(x, a.Evict | a.ForceDelete)]
    assert [x for x in decision.actions if isinstance(x, a.Uncordon)]


def test_a_window_moved_later_mid_drain_stops_the_evictions_too() -> None:
    later = replace(WINDOW, start=T0 + 10 * HOUR, end=T0 + 12 * HOUR)
    decision = decided(busy(later))
    assert decision.phase is Phase.HEALTHY
    assert not [x for x in decision.actions if isinstance(x, a.Evict)]
    assert decision.wake_at == later.start - 2 * HOUR  # taken out again when it is due


def test_a_fault_found_during_a_maintenance_drain_keeps_it_going() -> None:
    broken = report(finding(FaultClass.FATAL))
    decision = decided(busy(None), checks=broken)
    assert decision.phase is Phase.DRAINING
    assert [x for x in decision.actions if isinstance(x, a.Evict)]
