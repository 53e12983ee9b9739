"""Progress reports written from a thread of their own: no training step waits on a write.

:class:`BackgroundReporter` is a :class:`~pitcrew.client.progress.ProgressReporter`
whose ``step``, ``checkpoint``, ``resumed`` and ``flops`` only note what happened,
and when, and wake a daemon thread; the thread makes the writes with the reporter's
own rate limit, per-write timeout and backoff. An apiserver (or ``scontrol``) that
hangs or refuses holds that thread, never the training loop.

While a write is in flight, newer steps replace the step not yet written (only the
latest is ever worth reporting), so a slow apiserver makes nothing pile up;
checkpoints are kept in order (a few: they are minutes apart), each written with
the time it was taken, not the time the thread got to it, since the operator drains
a node once its job checkpointed *after* the node became Suspect. A report carries
the time of the step it reports, for the same reason.

Once training has stepped, a step the rate limit held back is written when the limit
allows, even if no step follows, and while no step comes the thread writes the same
step again every ``min_interval``, at most :data:`BEAT_EVERY` and at least
:data:`BEAT_FLOOR` (a beat): a rank whose process froze falls silent while the ranks
waiting for it go on beating, which is how the operator's hang detection tells the
rank that stopped first (:mod:`pitcrew.core.hangs`). :meth:`finish` at the end of
training ends the beats.

The framework hooks (:mod:`pitcrew.client.lightning`, :mod:`pitcrew.client.hf`,
:mod:`pitcrew.client.distributed`) report through one, and call :meth:`flush`
(bounded) when training ends, so the last checkpoint is not lost with the process.
"""

from __future__ import annotations

import atexit
import collections
import datetime
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pitcrew.client.progress import ProgressReporter, Timing

logger = logging.getLogger(__name__)
CHECKPOINTS_KEPT = 8
"""Checkpoints noted while writes lag, oldest dropped first (only the last one counts
for the operator; the others are history)."""
BEAT_EVERY = 15.0
"""Seconds between heartbeats while no step comes: a quarter of the shortest stall the
operator calls a hang (``hangs.minStall``, 60 s by default), so a rank still alive has
reported within half of it when the rest is judged."""
BEAT_FLOOR = 1.0
"""The shortest time between beats, whatever ``min_interval`` (0 writes every step)."""
EXIT_FLUSH = 5.0
"""Seconds the interpreter waits at exit for reports not yet written."""


@dataclass
class _Noted:
    """What happened since the thread last looked."""

    step: tuple[int, datetime.datetime] | None = None
    ranks: Timing | None = None
    checkpoints: collections.deque[tuple[int, datetime.datetime]] = field(
        default_factory=lambda: collections.deque(maxlen=CHECKPOINTS_KEPT)
    )
    resumed: tuple[int, datetime.datetime] | None = None
    flops: float | None = None
    paused: datetime.datetime | None = None
    finished: bool = False
    started: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.step
            or self.ranks
            or self.checkpoints
            or self.resumed
            or self.flops is not None
            or self.paused
            or self.finished
            or self.started
        )


class BackgroundReporter(ProgressReporter):
    """A :class:`~pitcrew.client.progress.ProgressReporter` that writes on a thread of
    its own. Takes the same arguments; ``step`` and ``checkpoint`` return False (the
    write has not happened yet)."""

    def __init__(self, **arguments: Any) -> None:
        super().__init__(**arguments)
        self._told = self.clock
        """The clock events are stamped with, in the training thread."""
        self._at = self._told()
        self.clock = lambda: self._at  # the writes carry the time of what they report
        self._cond = threading.Condition()
        self._noted = _Noted()
        self._busy = False
        self._beating = False
        """Training has stepped and not finished: a heartbeat is due now and then."""
        self._held = False
        """A step the rate limit held back: written when the limit allows."""
        self._wrote_at = -float("inf")
        """When the thread last wrote (its monotonic clock)."""
        self._thread: threading.Thread | None = None
        atexit.register(self.flush, EXIT_FLUSH)

    def step(self, step: int, *, ranks: Timing | None = None) -> bool:
        with self._cond:
            self._noted.step = (step, self._told())
            self._noted.paused = None  # a step ends the pause
            if ranks is not None:
                self._noted.ranks = ranks
            self._wake()
        return False

    def pause(self) -> bool:
        with self._cond:
            self._noted.paused = self._told()
            self._wake()
        return False

    def start(self) -> bool:
        with self._cond:
            self._noted.started = True
            self._wake()
        return False

    def finish(self) -> bool:
        with self._cond:
            self._noted.finished = True
            self._wake()
        return False

    def checkpoint(self, step: int) -> bool:
        with self._cond:
            self._noted.checkpoints.append((step, self._told()))
            self._wake()
        return False

    def resumed(self, step: int, saved_at: datetime.datetime) -> None:
        with self._cond:
            self._noted.resumed = (step, saved_at)
            self._wake()

    def flops(self, flops_per_step: float) -> None:
        with self._cond:
            self._noted.flops = flops_per_step
            self._wake()

    def flush(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for what was noted to be written (or given
        up, by the reporter's own rules); True if nothing is left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._noted or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _wake(self) -> None:
        """Under the lock: start the thread once, and tell it there is news."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pitcrew-progress", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._noted:
                    due = self._due()
                    left = None if due is None else due - self.timer()
                    if left is not None and left <= 0:
                        break  # a held step or a beat is due
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait(left)
                noted, self._noted, self._busy = self._noted, _Noted(), True
            try:
                self._write_noted(noted)
            except Exception:  # a bug here must not end the reports for good
                logger.warning("Pitcrew's progress report failed", exc_info=True)

    def _due(self) -> float | None:
        """When the next write is due though nothing new was noted (None: never)."""
        if not self._beating:
            return None
        if self._held:
            return self._next_write
        beat = min(max(self.min_interval, BEAT_FLOOR), BEAT_EVERY)
        return max(self._next_write, self._wrote_at + beat)

    def _write_noted(self, noted: _Noted) -> None:
        """The reporter's own calls, in the order things happened."""
        if noted.started:
            super().start()
        if noted.flops is not None:
            super().flops(noted.flops)
        if noted.resumed is not None:
            super().resumed(*noted.resumed)
        for step, self._at in noted.checkpoints:
            super().checkpoint(step)
        if noted.step is not None:
            step, self._at = noted.step
            self._beating = not self._finished
            self._held = not super().step(step, ranks=noted.ranks)
        if noted.paused is not None:  # noted after the step (a later step clears it)
            self._at = noted.paused
            self._held = False  # the pause's write carries the latest step
            super().pause()
        if noted.finished:
            self._beating = False
            super().finish()
        elif not noted and self._held:
            self._held = not super().step(self._step)  # with the time of that step
        elif not noted:
            self._write()  # a beat: the same step, its own time, written now
        self._wrote_at = self.timer()
