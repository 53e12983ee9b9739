"""The circuit breaker's state machine, on the production function."""

from __future__ import annotations

import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from pitcrew.api.gpunode import Phase
from pitcrew.core.breaker import Breaker, Transition, next_breaker
from pitcrew.core.views import FleetView
from support.lifecycle_data import T0, policy

SAFETY = policy(safety={"maxUnhealthy": 2, "stormCooldown": "15m"}).spec.safety
MINUTE = datetime.timedelta(minutes=1)


def fleet(refused: int) -> FleetView:
    return FleetView(total=20, phases={Phase.HEALTHY: 18, Phase.DRAINING: 2}, refused=refused)


def test_a_refusal_opens_the_breaker_and_says_how_many_are_held_back() -> None:
    state, transition = next_breaker(Breaker(), fleet=fleet(3), safety=SAFETY, now=T0)
    assert transition is Transition.OPENED
    assert state.open
    assert state.since == T0
    assert state.message == "2 of 20 nodes unhealthy, limit 2: 3 failing nodes kept in service"


def test_closing_starts_the_storm_cooldown_from_the_moment_it_closes() -> None:
    opened, _ = next_breaker(Breaker(), fleet=fleet(1), safety=SAFETY, now=T0)
    closed, transition = next_breaker(opened, fleet=fleet(0), safety=SAFETY, now=T0 + MINUTE)
    assert transition is Transition.CLOSED
    assert not closed.open
    assert closed.cooldown_until == T0 + MINUTE + datetime.timedelta(minutes=15)


def test_a_full_fleet_without_refusals_stays_closed_and_keeps_its_cooldown() -> None:
    earlier = Breaker(cooldown_until=T0 - MINUTE)
    state, transition = next_breaker(earlier, fleet=fleet(0), safety=SAFETY, now=T0)
    assert transition is None
    assert state == earlier


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=30))
def test_over_any_rounds_open_means_refusing_and_each_change_is_one_transition(
    refusals: list[int],
) -> None:
    state = Breaker()
    opened_at: datetime.datetime | None = None
    for minute, refused in enumerate(refusals):
        now = T0 + minute * MINUTE
        before = state
        state, transition = next_breaker(state, fleet=fleet(refused), safety=SAFETY, now=now)
        assert state.open == (refused > 0)
        if state.open and not before.open:
            assert transition is Transition.OPENED
            opened_at = now
        elif before.open and not state.open:
            assert transition is Transition.CLOSED
            assert state.cooldown_until == now + SAFETY.storm_cooldown
        else:
            assert transition is None
        if state.open:
            assert state.since == opened_at
