"""Counter history, for checks that act on a rate rather than a value.

NVML and sysfs expose cumulative counters (SBE ECC, NVLink CRC, PCIe replay,
IB link-downed). A rate needs two readings: the history keeps readings per
counter inside a window and answers the rate between the oldest and newest.
A counter that goes backwards (driver reload, GPU reset) restarts its
history instead of producing a negative rate. The first reading has no rate
(``None``): checks report nothing alarming until a second one exists.
"""

from __future__ import annotations

import datetime
from collections import deque
from collections.abc import Hashable


class CounterHistory:
    def __init__(self, *, window: datetime.timedelta) -> None:
        self.window = window
        self._readings: dict[Hashable, deque[tuple[datetime.datetime, float]]] = {}

    def rate_per_second(
        self, key: Hashable, *, now: datetime.datetime, value: float
    ) -> float | None:
        readings = self._readings.setdefault(key, deque())
        if readings and value < readings[-1][1]:
            readings.clear()
        readings.append((now, value))
        while len(readings) > 2 and now - readings[1][0] >= self.window:
            readings.popleft()
        first_time, first_value = readings[0]
        elapsed = (now - first_time).total_seconds()
        if elapsed <= 0:
            return None
        return (value - first_value) / elapsed
