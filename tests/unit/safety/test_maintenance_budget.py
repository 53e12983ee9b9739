"""Nodes out for a maintenance window are counted apart from the faults: the breaker
neither counts them, nor opens for them, nor cools down after them."""

from __future__ import annotations

import datetime

from pitcrew.api.gpunode import GPUNodeStatus, Phase
from pitcrew.api.policy import SafetySpec
from pitcrew.core.breaker import Breaker, next_breaker
from pitcrew.core.fleet import after_decision, fleet_of, summarize
from pitcrew.core.lifecycle import Decision
from pitcrew.core.safety import admit_drain, admit_maintenance, admit_unhealthy

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
SAFETY = SafetySpec.model_validate({"maxUnhealthy": 2})


def member(phase: Phase, reason: str = "") -> GPUNodeStatus:
    return GPUNodeStatus(phase=phase, reason=reason, phase_since=T0)


POOL = {
    "drained": member(Phase.MAINTENANCE, "Maintenance"),
    "leaving": member(Phase.SUSPECT, "Maintenance"),
    "draining": member(Phase.DRAINING, "Maintenance"),
    "broken": member(Phase.QUARANTINED, "Xid79"),
    **{f"ok-{i}": member(Phase.HEALTHY) for i in range(16)},
}


def test_nodes_out_for_a_window_are_not_unhealthy() -> None:
    fleet = fleet_of((name, summarize(status)) for name, status in POOL.items())
    assert (fleet.total, fleet.unhealthy, fleet.in_maintenance) == (20, 1, 3)
    assert admit_unhealthy(SAFETY, fleet, now=T0, cooldown_until=None).allowed
    refused = admit_maintenance(SAFETY, fleet)
    assert (refused.allowed, refused.reason) == (False, "MaintenanceLimit")


def test_a_fault_found_on_a_node_leaving_for_a_window_moves_it_to_the_faults() -> None:
    fleet = fleet_of((name, summarize(status)) for name, status in POOL.items())
    fatal = member(Phase.QUARANTINED, "Xid79")
    moved = after_decision(
        fleet, node="leaving", before=POOL["leaving"], decision=Decision(status=fatal)
    )
    assert (moved.unhealthy, moved.in_maintenance) == (2, 2)


def test_a_full_window_neither_opens_the_breaker_nor_starts_a_cooldown() -> None:
    out = {f"mw-{i}": member(Phase.MAINTENANCE, "Maintenance") for i in range(5)}
    fleet = fleet_of((name, summarize(status)) for name, status in out.items())
    breaker, transition = next_breaker(Breaker(), fleet=fleet, safety=SAFETY, now=T0)
    assert (breaker.open, transition, breaker.cooldown_until) == (False, None, None)


def test_a_windows_drain_and_a_faults_drain_take_slots_of_their_own() -> None:
    """maxConcurrentDrains 1: the pool's one drain for a window leaves the faults' slot
    free, and a fault's drain, once it begins, leaves the windows' slot as it was."""
    fleet = fleet_of((name, summarize(status)) for name, status in POOL.items())
    assert fleet.draining_for_maintenance == 1
    assert admit_drain(SAFETY, fleet, maintenance=False).allowed
    assert not admit_drain(SAFETY, fleet, maintenance=True).allowed
    fault_drains = after_decision(
        fleet,
        node="broken",
        before=POOL["broken"],
        decision=Decision(status=member(Phase.DRAINING, "Xid79")),
    )
    assert fault_drains.draining_for_maintenance == 1
    assert not admit_drain(SAFETY, fault_drains, maintenance=False).allowed
    done = after_decision(
        fault_drains,
        node="draining",
        before=POOL["draining"],
        decision=Decision(status=member(Phase.MAINTENANCE, "Maintenance")),
    )
    assert done.draining_for_maintenance == 0
    assert admit_drain(SAFETY, done, maintenance=True).allowed
