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

    def __bool__(self) -> bool:
        return bool(
            self.step or self.ranks or self.checkpoints or self.resumed or self.flops is not None
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
        self._thread: threading.Thread | None = None
        atexit.register(self.flush, EXIT_FLUSH)

    def step(self, step: int, *, ranks: Timing | None = None) -> bool:
        with self._cond:
            self._noted.step = (step, self._told())
            if ranks is not None:
                self._noted.ranks = ranks
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
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait()
                noted, self._noted, self._busy = self._noted, _Noted(), True
            try:
                self._write_noted(noted)
            except Exception:  # a bug here must not end the reports for good
                logger.warning("Pitcrew's progress report failed", exc_info=True)

    def _write_noted(self, noted: _Noted) -> None:
        """The reporter's own calls, in the order things happened."""
        if noted.flops is not None:
            super().flops(noted.flops)
        if noted.resumed is not None:
            super().resumed(*noted.resumed)
        for step, self._at in noted.checkpoints:
            super().checkpoint(step)
        if noted.step is not None:
            step, self._at = noted.step
            super().step(step, ranks=noted.ranks)
