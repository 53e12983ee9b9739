"""GPU time of a pool by phase, and its goodput over the last hour and day.

Prometheus gets the running totals (``pitcrew_gpu_seconds_total``) and can
take any window's ratio. The operator also keeps one day of per-minute
totals itself, so the policy status (and ``pitcrew status``) can say the
goodput of the last hour and day on a cluster without Prometheus.

Time is attributed from each node's phase transitions (its GPUNode history),
not sampled: the ledger splits the time between two ticks at the transition
times, so an outage shorter than a tick is still counted, to the
millisecond. Fleet goodput is the share of GPU time on nodes *in service*: Healthy, or
Spare (validated and held back for a replacement, usable within seconds).
Excluded nodes are outside the fleet and not counted.
"""

from __future__ import annotations

import datetime
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from pitcrew.api.gpunode import Phase, Transition
from pitcrew.api.vocabulary import IN_SERVICE

DAY_MINUTES = 24 * 60
MINUTE = datetime.timedelta(minutes=1)


@dataclass(frozen=True)
class NodeTime:
    pool: str
    phase: Phase
    gpus: int
    since: datetime.datetime | None = None
    name: str = ""
    """With ``transitions``: the node whose time is attributed from its own history."""
    transitions: tuple[Transition, ...] = ()
    """The GPUNode's phase transitions (``status.history``): the time between two ticks
    is split at their times, so a 300 ms quarantine is 300 ms of Quarantined GPU time
    whatever the tick."""


def phase_seconds(
    node: NodeTime, start: datetime.datetime, end: datetime.datetime
) -> list[tuple[Phase, datetime.datetime, datetime.datetime]]:
    """The node's phases over ``[start, end)`` as (phase, from, to) segments: split at
    the transitions in between; after the last one, the phase the node has now."""
    inside = sorted((t for t in node.transitions if start < t.time < end), key=lambda t: t.time)
    segments = []
    at = start
    for transition in inside:
        segments.append((transition.from_phase, at, transition.time))
        at = transition.time
    segments.append((node.phase, at, end))
    return [(phase, a, b) for phase, a, b in segments if b > a]


@dataclass
class _Minute:
    start: datetime.datetime
    in_service: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)


@dataclass
class FleetLedger:
    last: datetime.datetime
    minutes: deque[_Minute] = field(default_factory=lambda: deque(maxlen=DAY_MINUTES))

    def tick(
        self, nodes: Iterable[NodeTime], now: datetime.datetime
    ) -> dict[tuple[str, Phase], float]:
        """GPU-seconds per (pool, phase) since the last tick, split at each node's
        transitions; remembered per minute, each second in the minute it fell in.

        A transition the ledger learns of after it has accounted past its time (its
        status was written after the tick) is attributed from the tick on: the error
        is the write's delay, never the tick's length."""
        start, self.last = self.last, max(self.last, now)
        added: dict[tuple[str, Phase], float] = {}
        for node in nodes:
            if node.gpus <= 0:
                continue
            for phase, begin, end in phase_seconds(node, start, now):
                if phase is Phase.EXCLUDED:
                    continue
                key = (node.pool, phase)
                added[key] = added.get(key, 0.0) + node.gpus * (end - begin).total_seconds()
                self._remember(node.pool, phase, node.gpus, begin, end)
        return added

    def _remember(
        self, pool: str, phase: Phase, gpus: int, begin: datetime.datetime, end: datetime.datetime
    ) -> None:
        while begin < end:
            minute = begin.replace(second=0, microsecond=0)
            upto = min(end, minute + MINUTE)
            bucket = self._bucket(minute)
            if bucket is not None:
                seconds = gpus * (upto - begin).total_seconds()
                bucket.total[pool] = bucket.total.get(pool, 0.0) + seconds
                if phase in IN_SERVICE:
                    bucket.in_service[pool] = bucket.in_service.get(pool, 0.0) + seconds
            begin = upto

    def _bucket(self, minute: datetime.datetime) -> _Minute | None:
        """The bucket of ``minute``, made when it is newer than every bucket; None for a
        minute the ledger no longer keeps. Time is accounted in order, so a lookup only
        ever walks the few newest buckets."""
        if not self.minutes or self.minutes[-1].start < minute:
            self.minutes.append(_Minute(minute))
            return self.minutes[-1]
        for bucket in reversed(self.minutes):
            if bucket.start == minute:
                return bucket
            if bucket.start < minute:
                return None
        return None

    def goodput(
        self, pool: str, *, window: datetime.timedelta, now: datetime.datetime
    ) -> float | None:
        """In-service share of the pool's GPU time within ``window``; None without data."""
        since = now - window
        total = up = 0.0
        for bucket in reversed(self.minutes):
            if bucket.start < since:
                break
            total += bucket.total.get(pool, 0.0)
            up += bucket.in_service.get(pool, 0.0)
        return up / total if total > 0 else None
