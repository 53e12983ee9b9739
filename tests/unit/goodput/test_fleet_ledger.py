"""GPU time by phase and the fleet goodput ratio."""

from __future__ import annotations

import datetime

from pitcrew.api.gpunode import Phase
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
