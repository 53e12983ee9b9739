"""GPU time by phase and the fleet goodput ratio."""

from __future__ import annotations

import datetime

import pytest

from pitcrew.api.gpunode import Phase, Transition
from pitcrew.core.fleet_ledger import FleetLedger, NodeTime

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


def test_gpu_seconds_by_phase_and_goodput_over_a_window() -> None:
    ledger = FleetLedger(last=T0)
    fleet = [NodeTime("pool", Phase.HEALTHY, 8)] * 3 + [NodeTime("pool", Phase.DRAINING, 8)]
    added = ledger.tick(fleet, T0 + datetime.timedelta(seconds=10))
    assert added == {("pool", Phase.HEALTHY): 240.0, ("pool", Phase.DRAINING): 80.0}
    goodput = ledger.goodput(
        "pool", window=datetime.timedelta(hours=1), now=T0 + datetime.timedelta(seconds=10)
    )
    assert goodput == 0.75


def test_spares_count_as_in_service_and_excluded_nodes_not_at_all() -> None:
    ledger = FleetLedger(last=T0)
    fleet = [
        NodeTime("pool", Phase.SPARE, 8),
        NodeTime("pool", Phase.REMEDIATING, 8),
        NodeTime("pool", Phase.EXCLUDED, 8),
    ]
    now = T0 + datetime.timedelta(seconds=60)
    ledger.tick(fleet, now)
    assert ledger.goodput("pool", window=datetime.timedelta(hours=1), now=now) == 0.5


def test_old_minutes_fall_out_of_the_window() -> None:
    ledger = FleetLedger(last=T0)
    ledger.tick([NodeTime("pool", Phase.RETIRED, 8)], T0 + datetime.timedelta(minutes=1))
    later = T0 + datetime.timedelta(hours=2)
    ledger.tick([NodeTime("pool", Phase.HEALTHY, 8)], later)
    assert ledger.goodput("pool", window=datetime.timedelta(hours=1), now=later) == 1.0
    assert ledger.goodput("other", window=datetime.timedelta(hours=1), now=later) is None


def moves(*steps: tuple[float, Phase, Phase]) -> tuple[Transition, ...]:
    return tuple(
        Transition(
            time=T0 + datetime.timedelta(seconds=at), from_phase=a, to_phase=b, reason="test"
        )
        for at, a, b in steps
    )


def test_an_outage_shorter_than_a_tick_is_counted_to_the_millisecond() -> None:
    ledger = FleetLedger(last=T0)
    history = moves(
        (-600, Phase.VALIDATING, Phase.HEALTHY),  # before this tick: not counted again
        (1.0, Phase.HEALTHY, Phase.QUARANTINED),
        (1.3, Phase.QUARANTINED, Phase.DRAINING),
        (1.5, Phase.DRAINING, Phase.REMEDIATING),
        (2.0, Phase.REMEDIATING, Phase.VALIDATING),
        (2.25, Phase.VALIDATING, Phase.HEALTHY),
    )
    node = NodeTime("pool", Phase.HEALTHY, 8, name="n0", transitions=history)
    added = ledger.tick([node], T0 + datetime.timedelta(seconds=5))
    assert added == pytest.approx(
        {
            ("pool", Phase.HEALTHY): 8 * (1.0 + 2.75),
            ("pool", Phase.QUARANTINED): 8 * 0.3,
            ("pool", Phase.DRAINING): 8 * 0.2,
            ("pool", Phase.REMEDIATING): 8 * 0.5,
            ("pool", Phase.VALIDATING): 8 * 0.25,
        }
    )
    # The next tick sees the same history and adds only the time since.
    later = ledger.tick([node], T0 + datetime.timedelta(seconds=10))
    assert later == {("pool", Phase.HEALTHY): 40.0}


def test_time_is_remembered_in_the_minute_it_fell_in() -> None:
    ledger = FleetLedger(last=T0 + datetime.timedelta(seconds=30))
    history = moves((70, Phase.HEALTHY, Phase.REMEDIATING))
    node = NodeTime("pool", Phase.REMEDIATING, 1, name="n0", transitions=history)
    now = T0 + datetime.timedelta(seconds=150)
    ledger.tick([node], now)
    # 12:00:30-12:01:10 Healthy, then Remediating until 12:02:30.
    assert [(b.total["pool"], b.in_service.get("pool", 0.0)) for b in ledger.minutes] == [
        (30.0, 30.0),
        (60.0, 10.0),
        (30.0, 0.0),
    ]
    last_minute = ledger.goodput("pool", window=datetime.timedelta(minutes=1), now=now)
    assert last_minute == 0.0
