"""Job sizes read from their launchers' objects, cached, never on the event loop.

The accountant asks for a job's size at every tick (:meth:`JobSizes.get`); the
answer is what the cache holds, and a missing or stale entry is fetched on a
worker thread, so the tick never waits on the API. An object read is trusted for
``FRESH`` (a JobSet's replicas rarely change; an elastic job's new size shows
within minutes). A kind the operator may not read (403: the chart's
``rbac.readJobSizes`` is off, or the admin narrowed it) is said once in the log and
not asked again for ``FORBIDDEN_FOR``; a missing object (404: the job is being
deleted) or a transient error is asked again after ``RETRY``.

A 404 is a deleted job only where the apiserver still serves the version Pitcrew
reads (:data:`~pitcrew.core.job_size.owner`'s): after an upgrade of the launcher that
stopped serving it (JobSet no longer serving ``v1alpha2``), every job of the kind
answers 404. Then the size last read is kept, and the policies' status says so
(condition ``JobSizes=False``, through ``report``) until a read succeeds; a kind the
operator may not read is said there the same way.
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
Served = Callable[[Owner], list[str] | None]
"""The versions the apiserver serves of an owner's API group; None: not the group."""


class JobSizes:
    def __init__(
        self,
        fetch: Fetch,
        pool: Executor,
        *,
        clock: Callable[[], float] = time.monotonic,
        served: Served | None = None,
        report: Callable[[str], None] = lambda problem: None,
    ) -> None:
        self.fetch = fetch
        self.pool = pool
        self.clock = clock
        self.served = served
        """Asked after a 404 (:func:`discovery`): a deleted job, or a version no longer
        served? Without it a 404 is a deleted job."""
        self.unread: dict[str, str] = {}
        """Kinds that cannot be read as they should (a version not served, a 403), and
        what to say about it."""
        self.report = report
        """Told why some job sizes cannot be read as they should (empty: they can):
        the policies' status says it."""
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
            elif error.status == 404:
                self._not_found(owner)
            else:
                logger.info("reading %s %s/%s: %s", owner.kind, owner.namespace, owner.name, error)
        except Exception:  # any other failure: the pods seen count meanwhile
            due = self.clock() + RETRY
            logger.warning("reading %s %s failed", owner.kind, owner.name, exc_info=True)
        else:
            with self.lock:
                cleared = self.unread.pop(owner.kind, None) is not None
            if cleared:
                self._report()
        with self.lock:
            self.asking.discard(owner)
            previous, _ = self.known.pop(owner, (None, 0.0))
            self.known[owner] = (size if size is not None else previous, due)
            while len(self.known) > MAX_ENTRIES:
                del self.known[next(iter(self.known))]

    def _not_found(self, owner: Owner) -> None:
        """A 404: the job is being deleted, unless its version is no longer served."""
        if self.served is None:
            return
        try:
            versions = self.served(owner)
        except Exception:  # unknown which: the size last read stays either way
            logger.warning("reading the API group %s failed", owner.group, exc_info=True)
            return
        if versions is None or owner.version in versions:
            return  # the object is gone (or the whole launcher with its jobs)
        why = (
            f"{owner.kind} is served as {', '.join(versions) or 'no version'}, not "
            f"{owner.version}, which this operator reads: the jobs it launches keep the "
            "size last read (sized by the pods seen where none was read)"
        )
        with self.lock:
            first = self.unread.get(owner.kind) != why
            self.unread[owner.kind] = why
        if first:
            logger.warning("%s", why)
            self._report()

    def _report(self) -> None:
        with self.lock:
            problem = "; ".join(sorted(self.unread.values()))
        self.report(problem)

    def _forbid(self, owner: Owner) -> None:
        why = (
            f"may not read {owner.kind} (403 Forbidden): the jobs it launches are sized by "
            "the pods seen (grant get on it: the chart's rbac.readJobSizes)"
        )
        with self.lock:
            first = owner.kind not in self.forbidden
            self.forbidden[owner.kind] = self.clock() + FORBIDDEN_FOR
            self.unread[owner.kind] = why
        if first:
            logger.warning("%s", why)
            self._report()


def discovery(api: client.ApiClient) -> Served:
    """The versions the apiserver serves of an owner's API group (the core group's
    ``v1`` always); None where it serves no such group."""

    def versions(owner: Owner) -> list[str] | None:
        if not owner.group:
            return [owner.version]
        try:
            found = request(api, "GET", f"/apis/{owner.group}")
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return [str(v.get("version")) for v in found.get("versions") or []]

    return versions


def fetcher(api: client.ApiClient) -> Fetch:
    """Reads an owner object with the operator's API client."""

    def fetch(owner: Owner) -> dict[str, object]:
        return dict(request(api, "GET", owner.path))

    return fetch
