"""Safety arithmetic: the circuit breaker and the concurrency bounds.

Pure functions of the policy and a fleet snapshot. "Unhealthy" means taken
out of service by Pitcrew for a fault (:data:`~pitcrew.api.vocabulary.UNHEALTHY`,
:attr:`~pitcrew.core.views.FleetView.unhealthy`). Retired counts until a person
removes the node: if it did not, a fleet-wide cause (a bad driver, a switch) would
fail, retire and free the slot of node after node, and the breaker would only slow
the storm down instead of stopping it. Validating is not counted: a batch of new
nodes in burn-in must not trip the breaker for the rest of the fleet.

Planned maintenance is not a fault and spends none of that budget: nodes out for a
window (and on their way out) have a budget of their own of the same size
(:func:`admit_maintenance`). Counted with the faults, a window would refuse a node
with a fatal Xid elsewhere, open the breaker with a "fleet-wide cause" message, and,
when it ended, start a storm cooldown that held quarantines back for no storm. A
window's refusal is ``MaintenanceLimit``, which the breaker does not count: the
nodes it holds back are not failing.

A percentage limit is rounded to the nearest node and is at least one node
when the percentage is above zero, so that the 10 % default still lets a
four-node cluster quarantine its one broken node.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

from pitcrew.api.gpunode import Phase
from pitcrew.api.policy import PeriodicVerificationSpec, SafetySpec
from pitcrew.core.views import FleetView

DEFAULT_MAX_UNHEALTHY = "10%"


def resolve(value: int | str, total: int) -> int:
    if isinstance(value, int):
        return value
    percent = int(value.rstrip("%"))
    if percent == 0:
        return 0
    return max(1, math.floor(total * percent / 100 + 0.5))


def unhealthy_limit(safety: SafetySpec, *, total: int) -> int:
    """Most nodes that may be unhealthy at once."""
    if safety.min_healthy is not None:
        return max(0, total - resolve(safety.min_healthy, total))
    return resolve(
        safety.max_unhealthy if safety.max_unhealthy is not None else DEFAULT_MAX_UNHEALTHY, total
    )


@dataclass(frozen=True)
class Admission:
    allowed: bool
    reason: str = ""
    message: str = ""
    until: datetime.datetime | None = None
    """When a refusal ends by time alone (a cooldown), if it does."""


def admit_unhealthy(
    safety: SafetySpec,
    fleet: FleetView,
    *,
    now: datetime.datetime,
    cooldown_until: datetime.datetime | None,
) -> Admission:
    """May one more node be taken out of service?"""
    limit = unhealthy_limit(safety, total=fleet.total)
    unhealthy = fleet.unhealthy
    if unhealthy >= limit:
        return Admission(
            False,
            "CircuitBreakerOpen",
            f"{unhealthy} of {fleet.total} nodes already unhealthy (limit {limit}): "
            "a fleet-wide cause (driver rollout, switch, power) is more likely "
            "than this many broken nodes",
        )
    if cooldown_until is not None and now < cooldown_until:
        return Admission(
            False,
            "StormCooldown",
            f"quarantines resume at {cooldown_until.isoformat()} after the last breaker trip",
            until=cooldown_until,
        )
    return Admission(True)


def admit_maintenance(safety: SafetySpec, fleet: FleetView) -> Admission:
    """May one more node leave service for a maintenance window? Planned work takes at
    most :func:`unhealthy_limit` nodes of the pool at once (its ``maxUnhealthy``, or what
    ``minHealthy`` leaves), counted apart from the faults: a window never refuses a
    broken node, nor a broken node a window. No cooldown applies (there was no storm)."""
    limit = unhealthy_limit(safety, total=fleet.total)
    out = fleet.in_maintenance
    if out >= limit:
        return Admission(
            False,
            "MaintenanceLimit",
            f"{out} of {fleet.total} nodes already out for maintenance (limit {limit}, the "
            "pool's maxUnhealthy): the next leaves when one comes back",
        )
    return Admission(True)


def admit_drain(safety: SafetySpec, fleet: FleetView, *, maintenance: bool) -> Admission:
    """May one more drain begin? Drains for faults and drains for maintenance windows
    each have ``maxConcurrentDrains`` slots: a broken node, cordoned and waiting, never
    waits for a window's planned drain to finish, nor a window for a fault's."""
    windows = fleet.draining_for_maintenance
    draining = windows if maintenance else fleet.count(Phase.DRAINING) - windows
    if draining >= safety.max_concurrent_drains:
        what = "for maintenance " if maintenance else "for faults "
        return Admission(
            False,
            "DrainLimit",
            f"{draining} drains {what}in progress (maxConcurrentDrains "
            f"{safety.max_concurrent_drains})",
        )
    return Admission(True)


def admit_remediation(safety: SafetySpec, fleet: FleetView) -> Admission:
    remediating = fleet.count(Phase.REMEDIATING)
    if remediating >= safety.max_concurrent_remediations:
        return Admission(
            False,
            "RemediationLimit",
            f"{remediating} remediations in progress (maxConcurrentRemediations "
            f"{safety.max_concurrent_remediations})",
        )
    return Admission(True)


def verification_limit(periodic: PeriodicVerificationSpec, *, total: int) -> int:
    """Most nodes of a pool verified at once: ``maxConcurrent``, at least one node."""
    return max(1, resolve(periodic.max_concurrent, total))


def admit_verification(periodic: PeriodicVerificationSpec, fleet: FleetView) -> Admission:
    limit = verification_limit(periodic, total=fleet.total)
    if fleet.verifying >= limit:
        return Admission(
            False,
            "VerificationLimit",
            f"{fleet.verifying} verifications in progress (maxConcurrent {limit})",
        )
    return Admission(True)
