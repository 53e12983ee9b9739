"""The demo's fault schedule: reproducible, and drawn from the published mix."""

from __future__ import annotations

from collections import Counter

from pitcrew.dev.demo.scenario import HANG, MIX, SOFTWARE, ScheduledFault, schedule


def test_same_seed_same_faults_other_seed_other_faults() -> None:
    first = schedule(seed=7, duration=3600, mean_interval=30)
    assert first == schedule(seed=7, duration=3600, mean_interval=30)
    assert first != schedule(seed=8, duration=3600, mean_interval=30)
    assert all(0 < f.at < 3600 for f in first)


def test_long_schedules_follow_the_failure_mix() -> None:
    faults = schedule(seed=1, duration=2_000_000, mean_interval=100)
    counts = Counter(f.category for f in faults)
    weights = {name: weight for name, weight, _ in MIX}
    total = sum(weights.values())
    for name, weight in weights.items():
        assert abs(counts[name] / len(faults) - weight / total) < 0.02
    assert all((f.fault is None) == (f.category == SOFTWARE) for f in faults)


def test_a_hang_is_scheduled_when_asked_for_and_only_then() -> None:
    plain = schedule(seed=7, duration=600, mean_interval=60)
    hung = schedule(seed=7, duration=600, mean_interval=60, hang_at=90)
    assert [f for f in hung if f.category == HANG] == [ScheduledFault(90, HANG, None, 0.5)]
    assert [f for f in hung if f.category != HANG] == plain
    assert hung == sorted(hung, key=lambda f: f.at)
