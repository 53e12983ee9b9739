"""The executor's worker threads, in two lanes: cordons first, everything else after.

When 150 nodes fail at once, each plan's first write is the cordon that keeps new
work off the node; its status, its Events, a spare's reservation and the start of
its remediation follow. In one first-in, first-out pool, node 150's cordon waits
behind the status writes of the 149 before it, on an apiserver every one of those
writes loads. :class:`Lanes` runs the cordons (:meth:`Lanes.submit_first`) ahead of
anything else (:meth:`Lanes.submit`, the ordinary :class:`~concurrent.futures.Executor`
call, so ``run_in_executor`` takes it too):

- a free worker takes a cordon if one waits;
- it starts other work only while no cordon waits or runs, so the follow-up writes
  of a burst go out once its cordons are out, not between them;
- :data:`RESERVED` of the workers never start other work, so a cordon that comes
  while slow follow-ups (a drain's evictions) hold the others starts at once.

:meth:`Lanes.wait_first` lets another writer hold back the same way: the Event
recorder waits with it before each post (:class:`~pitcrew.kube.events.Recorder`).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, Protocol

RESERVED = 4
"""Workers that run cordons only."""

Work = tuple[Future[Any], Callable[[], Any]]


class Pool(Protocol):
    """What the round loop needs of its workers: :class:`Lanes`, or a test's fake."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]: ...

    def submit_first(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]: ...


class Lanes(Executor):
    def __init__(self, workers: int, *, name: str = "pitcrew-exec") -> None:
        self._reserved = min(RESERVED, workers - 1)
        self._workers = workers
        self._first: collections.deque[Work] = collections.deque()
        self._after: collections.deque[Work] = collections.deque()
        self._first_running = 0
        self._after_running = 0
        self._changed = threading.Condition()
        for number in range(workers):
            threading.Thread(target=self._work, daemon=True, name=f"{name}_{number}").start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``fn`` once no cordon waits or runs."""
        return self._put(self._after, fn, args, kwargs)

    def submit_first(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``fn`` (a cordon) ahead of everything :meth:`submit` queued."""
        return self._put(self._first, fn, args, kwargs)

    def wait_first(self, timeout: float) -> None:
        """Return once no cordon waits or runs, or after ``timeout`` seconds."""
        with self._changed:
            self._changed.wait_for(lambda: not self._first_busy(), timeout)

    def _first_busy(self) -> bool:
        return bool(self._first) or self._first_running > 0

    def _put(
        self,
        lane: collections.deque[Work],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Future[Any]:
        future: Future[Any] = Future()
        with self._changed:
            lane.append((future, lambda: fn(*args, **kwargs)))
            self._changed.notify_all()
        return future

    def _next(self) -> tuple[Work, bool]:
        """The next work this worker runs, and whether it is a cordon (under the lock)."""
        while True:
            if self._first:
                self._first_running += 1
                return self._first.popleft(), True
            if (
                self._after
                and not self._first_busy()
                and self._after_running < self._workers - self._reserved
            ):
                self._after_running += 1
                return self._after.popleft(), False
            self._changed.wait()

    def _work(self) -> None:
        while True:
            with self._changed:
                (future, call), first = self._next()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call())
                except BaseException as error:  # handed to whoever waits on the future
                    future.set_exception(error)
            with self._changed:
                if first:
                    self._first_running -= 1
                else:
                    self._after_running -= 1
                self._changed.notify_all()
