"""Lease-based leader election (coordination.k8s.io/v1), Pitcrew's own.

One thread (:class:`Elector`) campaigns for the operator's Leases, every
:attr:`~pitcrew.core.lease.Timing.retry` seconds, on the raw request path
(:mod:`pitcrew.kube.leases`). It replaced the kubernetes client's
``leaderelection``, which lost the Lease of a busy operator (its renewal thread
and generated client starved behind the rounds of 1,500 nodes) and which ended
its thread silently on any error but an ``ApiException`` (a connection refused
while the apiserver restarted), leaving the old leader acting.

The rules are :mod:`pitcrew.core.lease`'s: a Lease is taken once it stood
unchanged for its duration on this process's own clock; its holder acts only
within its :class:`~pitcrew.core.lease.Tenure`, the renew deadline after the
last renewal it *sent* that succeeded. A holder renews by writing over the Lease
it last wrote, without reading it first (one request per renewal); a 409 says the
Lease changed under it, and the read that follows says whether it is still the
holder. A transient error is retried on the next turn, a retry period later,
until the tenure runs out: then, or when a read shows another holder, the Lease
is lost (``lost``), at once.

:func:`wait_for_leadership` keeps the operator's rule for its one Lease: the
process blocks until it holds it, and exits when it loses it or when the
election's thread ends for whatever reason; the restart makes it a candidate.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client

from pitcrew.core.lease import Seen, Step, Tenure, Timing, seen, step
from pitcrew.kube import leases
from pitcrew.kube.client import is_transient

logger = logging.getLogger(__name__)
EXIT_LOST_LEASE = 3
EXIT_ELECTION_ENDED = 4
Clock = Callable[[], float]
Wall = Callable[[], datetime.datetime]


def wall_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def ignore(_: str) -> None:
    """A Lease won or lost that the caller need not hear of."""


class Elector:
    """Campaigns for Leases in ``namespace`` as ``identity``, from the thread that
    calls :meth:`run`; :meth:`leads` says, from any thread, whether this process may
    act for a Lease now. ``won`` and ``lost`` are called on the election's thread
    when a Lease is taken and when it is lost."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        identity: str,
        timing: Timing,
        won: Callable[[str], None] = ignore,
        lost: Callable[[str], None] = ignore,
        clock: Clock = time.monotonic,
        wall: Wall = wall_now,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.identity = identity
        self.timing = timing
        self.won = won
        self.lost = lost
        self.clock = clock
        self.wall = wall
        self._wanted: tuple[str, ...] = ()
        self._tenures: dict[str, Tenure] = {}
        self._held: dict[str, dict[str, Any]] = {}
        """Each Lease held, as the apiserver answered the last write of it."""
        self._seen: dict[str, Seen] = {}
        self._stop = threading.Event()
        self._turning = threading.Lock()

    def campaign(self, names: Iterable[str]) -> None:
        """Campaign for ``names`` from the next turn on (safe from any thread)."""
        self._wanted = tuple(sorted(set(names)))

    def leads(self, name: str) -> bool:
        """Whether this process may act for Lease ``name`` now: within its tenure."""
        tenure = self._tenures.get(name)
        return tenure is not None and tenure.valid(self.clock())

    def run(self) -> None:
        """A turn every retry period until :meth:`release`."""
        while not self._stop.is_set():
            started = self.clock()
            with self._turning:
                if not self._stop.is_set():
                    self.turn()
            self._stop.wait(max(0.0, started + self.timing.retry - self.clock()))

    def stopped(self) -> bool:
        return self._stop.is_set()

    def turn(self) -> None:
        """One try at each Lease campaigned for."""
        for name in self._wanted:
            try:
                self._try(name)
            except Exception as error:
                if is_transient(error):
                    logger.warning("Lease %s/%s: %s; retried", self.namespace, name, error)
                else:
                    logger.exception("Lease %s/%s failed; retried", self.namespace, name)
            if name in self._held and not self.leads(name):
                self._lose(name, f"not renewed within {self.timing.renew_deadline:.0f}s")

    def release(self) -> None:
        """Stop campaigning and give back every Lease held, having stopped acting for
        it: a candidate takes it at once instead of waiting out its duration (a
        rollout, a clean stop)."""
        self._stop.set()
        with self._turning:
            self._give_back()

    def _give_back(self) -> None:
        for name, lease in list(self._held.items()):
            self._tenures[name].end()
            del self._held[name]
            try:
                leases.replace(
                    self.api,
                    leases.given_back(lease, now=self.wall()),
                    timeout=self.timing.retry,
                )
                logger.info("%s gave back the Lease %s/%s", self.identity, self.namespace, name)
            except Exception as error:  # it runs out on its own
                logger.warning("giving back the Lease %s/%s: %s", self.namespace, name, error)

    def _try(self, name: str) -> None:
        mine = self._held.get(name)
        if mine is not None:
            try:
                self._write(name, leases.replace, mine)
                return
            except client.ApiException as error:
                if error.status not in (404, 409):
                    raise
                del self._held[name]  # changed under it: read who holds it now
        now = self.clock()
        lease = leases.read(self.api, self.namespace, name, timeout=self.timing.retry)
        if lease is None:
            self._seen.pop(name, None)
        else:
            self._seen[name] = seen(self._seen.get(name), leases.record(lease), now)
        match step(self._seen.get(name), identity=self.identity, now=now):
            case Step.CREATE:
                self._write(name, leases.create, None)
            case Step.RENEW | Step.TAKE:
                self._write(name, leases.replace, lease)
            case Step.WAIT:
                if mine is not None:
                    self._lose(name, f"{self._seen[name].record.holder} holds it now")

    def _write(
        self,
        name: str,
        call: Callable[..., dict[str, Any]],
        before: dict[str, Any] | None,
    ) -> None:
        body = leases.held(
            namespace=self.namespace,
            name=name,
            identity=self.identity,
            seconds=self.timing.lease,
            now=self.wall(),
            before=before,
        )
        sent = self.clock()
        answer = call(self.api, body, timeout=self.timing.retry)
        tenure = self._tenures.setdefault(name, Tenure(self.timing.renew_deadline))
        fresh = name not in self._held
        self._held[name] = answer
        tenure.renewed(sent)
        if fresh:
            logger.info("%s holds the Lease %s/%s", self.identity, self.namespace, name)
            self.won(name)

    def _lose(self, name: str, why: str) -> None:
        self._held.pop(name, None)
        self._tenures[name].end()
        logger.error("%s lost the Lease %s/%s: %s", self.identity, self.namespace, name, why)
        self.lost(name)


def run_until_it_ends(
    run: Callable[[], Any],
    *,
    stopped: Callable[[], bool] = lambda: False,
    exit: Callable[[int], Any] = os._exit,
) -> None:
    """Run the election; when it returns (unless ``stopped`` on purpose) or raises,
    the process must not go on."""
    try:
        run()
        if stopped():
            return
        logger.error("leader election ended: exiting")
    except BaseException:
        logger.exception("leader election failed: exiting")
    exit(EXIT_ELECTION_ENDED)


def wait_for_leadership(
    api: client.ApiClient, *, name: str, namespace: str, identity: str, lease_seconds: int
) -> Elector:
    """Block until this process holds Lease ``name``; exit the process when it is lost
    later. The elector's ``leads(name)`` is what the executor checks before every write."""
    leading = threading.Event()

    def lost(_: str) -> None:
        logger.error("%s lost the Lease %s/%s: exiting", identity, namespace, name)
        os._exit(EXIT_LOST_LEASE)

    elector = Elector(
        api,
        namespace=namespace,
        identity=identity,
        timing=Timing(lease_seconds),
        won=lambda _: leading.set(),
        lost=lost,
    )
    elector.campaign([name])
    threading.Thread(
        target=run_until_it_ends,
        args=(elector.run,),
        kwargs={"stopped": elector.stopped},
        daemon=True,
        name="pitcrew-leases",
    ).start()
    logger.info("%s waiting for the Lease %s/%s", identity, namespace, name)
    leading.wait()
    return elector
