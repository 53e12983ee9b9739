"""Simulated time: an event queue, and the one conversion to the datetimes the core reads.

Events are callbacks at a time in seconds from the start; two at the same time run
in the order they were scheduled, so a run is deterministic. Nothing sleeps.
"""

from __future__ import annotations

import datetime
import heapq
from collections.abc import Callable
from typing import Any

START = datetime.datetime(2026, 1, 5, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return START + datetime.timedelta(seconds=seconds)


def seconds(when: datetime.datetime) -> float:
    return (when - START).total_seconds()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0

    def at(self, when: float, callback: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._queue, (max(when, self.now), self._seq, callback, args))
        self._seq += 1

    def after(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        self.at(self.now + delay, callback, *args)

    def run(self, until: float) -> None:
        queue = self._queue
        while queue and queue[0][0] <= until:
            when, _, callback, args = heapq.heappop(queue)
            self.now = when
            callback(*args)
        self.now = until

    @property
    def ran(self) -> int:
        """Events run so far: those scheduled less those still waiting."""
        return self._seq - len(self._queue)

    @property
    def datetime(self) -> datetime.datetime:
        return at(self.now)
