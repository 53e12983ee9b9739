"""The circuit breaker's state machine: open, close, cool down.

The arithmetic of *whether* one more node may leave service lives in
:mod:`pitcrew.core.safety`; this module decides what the breaker *is* after a
round, which is what the policy status shows, what the alert fires on and
what starts the storm cooldown:

- **open** while the limit refuses at least one node that failed. A fleet that
  merely sits at its limit is not open: nothing is being held back, and an
  alert on it would fire during every ordinary repair of the last free slot.
- **closing** (open last round, no refusal now) starts the cooldown:
  ``safety.stormCooldown`` from now, no new quarantines. A fleet-wide cause
  that made the breaker trip (a driver rollout, a switch) tends to come back
  in waves; the cooldown keeps the second wave from draining the fleet slot
  by slot as repairs free them.
- the time it opened (``since``) survives rounds while it stays open, so the
  status says how long nodes have been held back.
- a cooldown never ends later than ``safety.stormCooldown`` from now: one stamped
  further ahead came from a clock ahead of this one (a former leader's, or a hand
  edit) and would hold quarantines back for as long as that clock was off.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from enum import StrEnum

from pitcrew.api.policy import SafetySpec
from pitcrew.core.safety import unhealthy_limit
from pitcrew.core.views import FleetView


class Transition(StrEnum):
    OPENED = "CircuitBreakerOpen"
    CLOSED = "CircuitBreakerClosed"


@dataclass(frozen=True)
class Breaker:
    open: bool = False
    since: datetime.datetime | None = None
    message: str = ""
    cooldown_until: datetime.datetime | None = None
    """Quarantines resume after this time; kept after it passes (it is history)."""


def next_breaker(
    current: Breaker, *, fleet: FleetView, safety: SafetySpec, now: datetime.datetime
) -> tuple[Breaker, Transition | None]:
    """The breaker after a round that left ``fleet``; the transition, if it changed."""
    cooldown = current.cooldown_until
    if cooldown is not None and cooldown > now + safety.storm_cooldown:
        cooldown = now + safety.storm_cooldown
    if fleet.refused > 0:
        limit = unhealthy_limit(safety, total=fleet.total)
        message = (
            f"{fleet.unhealthy} of {fleet.total} nodes unhealthy, limit {limit}: "
            f"{fleet.refused} failing nodes kept in service"
        )
        since = current.since if current.open and current.since else now
        state = Breaker(True, since, message, cooldown)
        return state, None if current.open else Transition.OPENED
    if current.open:
        return Breaker(cooldown_until=now + safety.storm_cooldown), Transition.CLOSED
    return Breaker(cooldown_until=cooldown), None
