"""GPU time of a pool by phase, and its goodput over the last hour and day.

Prometheus gets the running totals (``pitcrew_gpu_seconds_total``) and can
take any window's ratio. The operator also keeps one day of per-minute
totals itself, so the policy status (and ``pitcrew status``) can say the
goodput of the last hour and day on a cluster without Prometheus.

Fleet goodput is the share of GPU time on nodes *in service*: Healthy, or
Spare (validated and held back for a replacement, usable within seconds).
Excluded nodes are outside the fleet and not counted.
"""

from __future__ import annotations

import datetime
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import IN_SERVICE

DAY_MINUTES = 24 * 60


@dataclass(frozen=True)
class NodeTime:
    pool: str
    phase: Phase
    gpus: int
    since: datetime.datetime | None = None


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
        """GPU-seconds per (pool, phase) since the last tick; remembered per minute."""
        dt = max(0.0, (now - self.last).total_seconds())
        self.last = now
        added: dict[tuple[str, Phase], float] = {}
        for node in nodes:
            if node.phase is Phase.EXCLUDED or node.gpus <= 0:
                continue
            key = (node.pool, node.phase)
            added[key] = added.get(key, 0.0) + node.gpus * dt
        minute = now.replace(second=0, microsecond=0)
        if not self.minutes or self.minutes[-1].start != minute:
            self.minutes.append(_Minute(minute))
        bucket = self.minutes[-1]
        for (pool, phase), seconds in added.items():
            bucket.total[pool] = bucket.total.get(pool, 0.0) + seconds
            if phase in IN_SERVICE:
                bucket.in_service[pool] = bucket.in_service.get(pool, 0.0) + seconds
        return added

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
