"""Counter history, for checks that act on a rate rather than a value.

NVML and sysfs expose cumulative counters (SBE ECC, NVLink CRC, PCIe replay,
IB link-downed). A rate needs two readings: the history keeps readings per
counter inside a window and answers the rate between the oldest and newest.
A counter that goes backwards (driver reload, GPU reset) restarts its
history instead of producing a negative rate. The first reading has no rate
(``None``): checks report nothing alarming until a second one exists.

A rate over a short span is not a rate: one correctable error between two
sweeps 30 s apart reads as 120 an hour, above the watch threshold, on a
perfectly healthy GPU. So the span a rate divides by is at least
``min_span`` (the ``rate.min_span_s`` threshold): a single tick stays a
single tick, while a real storm of hundreds a minute still crosses its
threshold within the first sweeps.
"""

from __future__ import annotations

import datetime
from collections import deque
from collections.abc import Hashable


class CounterHistory:
    def __init__(
        self,
        *,
        window: datetime.timedelta,
        min_span: datetime.timedelta = datetime.timedelta(0),
    ) -> None:
        self.window = window
        self.min_span = min_span
        self._readings: dict[Hashable, deque[tuple[datetime.datetime, float]]] = {}

    def _record(
        self, key: Hashable, now: datetime.datetime, value: float, window: datetime.timedelta
    ) -> deque[tuple[datetime.datetime, float]]:
        readings = self._readings.setdefault(key, deque())
        if readings and value < readings[-1][1]:
            readings.clear()
        readings.append((now, value))
        while len(readings) > 2 and now - readings[1][0] >= window:
            readings.popleft()
        return readings

    def rate_per_second(
        self, key: Hashable, *, now: datetime.datetime, value: float
    ) -> float | None:
        readings = self._record(key, now, value, self.window)
        first_time, first_value = readings[0]
        elapsed = (now - first_time).total_seconds()
        if elapsed <= 0:
            return None
        return (value - first_value) / max(elapsed, self.min_span.total_seconds())

    def increase(
        self, key: Hashable, *, now: datetime.datetime, value: float, within: datetime.timedelta
    ) -> float | None:
        """How much the counter rose over the last ``within`` (or since its first
        reading, if that is more recent): for events counted per hour, where each
        one matters and "3 an hour" means three of them, not one in 20 minutes."""
        readings = self._record(key, now, value, within)
        first_time, first_value = readings[0]
        if now <= first_time:
            return None
        return value - first_value
