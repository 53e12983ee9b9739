"""A storm cooldown stamped by a clock ahead of the operator's (a former leader's, a
hand edit) ends ``stormCooldown`` from now at the latest, never when that clock says."""

from __future__ import annotations

import datetime

from pitcrew.api.gpunode import Phase
from pitcrew.core.breaker import Breaker, next_breaker
from pitcrew.core.safety import admit_unhealthy
from pitcrew.core.views import FleetView
from support.lifecycle_data import T0, policy

SAFETY = policy(safety={"maxUnhealthy": 2, "stormCooldown": "15m"}).spec.safety
COOLDOWN = datetime.timedelta(minutes=15)
QUIET = FleetView(total=20, phases={Phase.HEALTHY: 20})


def test_a_cooldown_from_a_clock_a_day_ahead_is_cut_to_storm_cooldown() -> None:
    ahead = Breaker(cooldown_until=T0 + datetime.timedelta(days=1))
    state, transition = next_breaker(ahead, fleet=QUIET, safety=SAFETY, now=T0)
    assert transition is None
    assert state.cooldown_until == T0 + COOLDOWN
    # Written back, it is stable: it ends then, whatever happens meanwhile.
    later, _ = next_breaker(state, fleet=QUIET, safety=SAFETY, now=T0 + COOLDOWN / 2)
    assert later.cooldown_until == T0 + COOLDOWN
    assert admit_unhealthy(
        SAFETY, QUIET, now=T0 + COOLDOWN, cooldown_until=later.cooldown_until
    ).allowed


def test_a_cooldown_within_storm_cooldown_is_kept() -> None:
    within = Breaker(cooldown_until=T0 + COOLDOWN - datetime.timedelta(minutes=1))
    state, _ = next_breaker(within, fleet=QUIET, safety=SAFETY, now=T0)
    assert state.cooldown_until == within.cooldown_until
