"""Job sizes read from their launchers' objects, cached, never on the event loop.

The accountant asks for a job's size at every tick (:meth:`JobSizes.get`); the
answer is what the cache holds, and a missing or stale entry is fetched on a
worker thread, so the tick never waits on the API. An object read is trusted for
``FRESH`` (a JobSet's replicas rarely change; an elastic job's new size shows
within minutes). A kind the operator may not read (403: the chart's
``rbac.readJobSizes`` is off, or the admin narrowed it) is said once in the log and
not asked again for ``FORBIDDEN_FOR``; a missing object (404: the job is being
deleted) or a transient error is asked again after ``RETRY``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor

from kubernetes import client

from pitcrew.core.job_size import Owner, declared_size
from pitcrew.kube.client import request

logger = logging.getLogger(__name__)
FRESH = 300.0
RETRY = 30.0
FORBIDDEN_FOR = 3600.0
MAX_ENTRIES = 10_000
"""Owners cached at most: past it the oldest answers go (they are fetched again)."""

Fetch = Callable[[Owner], dict[str, object]]


class JobSizes:
    def __init__(
        self,
        fetch: Fetch,
        pool: Executor,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fetch = fetch
        self.pool = pool
        self.clock = clock
        self.known: dict[Owner, tuple[int | None, float]] = {}
        """Each owner's size (None: none to read) and when to ask again."""
        self.forbidden: dict[str, float] = {}
        """Kinds the operator may not read, until when."""
        self.asking: set[Owner] = set()
        self.lock = threading.Lock()

    def get(self, owner: Owner) -> int | None:
        """The size last read (None if none yet); a fetch is started when due."""
        now = self.clock()
        with self.lock:
            size, due = self.known.get(owner, (None, 0.0))
            if now < due or owner in self.asking or now < self.forbidden.get(owner.kind, 0.0):
                return size
            self.asking.add(owner)
        self.pool.submit(self._read, owner)
        return size

    def _read(self, owner: Owner) -> None:
        size: int | None = None
        due = self.clock() + FRESH
        try:
            size = declared_size(owner, self.fetch(owner))
        except client.ApiException as error:
            due = self.clock() + RETRY
            if error.status == 403:
                self._forbid(owner)
            elif error.status != 404:
                logger.info("reading %s %s/%s: %s", owner.kind, owner.namespace, owner.name, error)
        except Exception:  # any other failure: the pods seen count meanwhile
            due = self.clock() + RETRY
            logger.warning("reading %s %s failed", owner.kind, owner.name, exc_info=True)
        with self.lock:
            self.asking.discard(owner)
            previous, _ = self.known.pop(owner, (None, 0.0))
            self.known[owner] = (size if size is not None else previous, due)
            while len(self.known) > MAX_ENTRIES:
                del self.known[next(iter(self.known))]

    def _forbid(self, owner: Owner) -> None:
        with self.lock:
            first = owner.kind not in self.forbidden
            self.forbidden[owner.kind] = self.clock() + FORBIDDEN_FOR
        if first:
            logger.warning(
                "may not read %s: jobs it launches are sized by the pods seen "
                "(grant get on it: the chart's rbac.readJobSizes)",
                owner.kind,
            )


def fetcher(api: client.ApiClient) -> Fetch:
    """Reads an owner object with the operator's API client."""

    def fetch(owner: Owner) -> dict[str, object]:
        return dict(request(api, "GET", owner.path))

    return fetch
