"""Lease-based leader election (coordination.k8s.io/v1), Pitcrew's own, by shard.

The operator's work is split into shards (design 017), each led through a Lease
of its own: one per pool (a GPUHealthPolicy's nodes) and one for the cluster-wide
work. One thread per replica (:class:`Elector`) takes a turn every
:attr:`~pitcrew.core.lease.Timing.retry` seconds on the raw request path
(:mod:`pitcrew.kube.leases`): it reads the whole election in one LIST, renews
the Leases it holds and its member Lease (how the others know it is alive),
gives back a shard beyond its fair share, and takes free ones within it. It
replaced the kubernetes client's ``leaderelection``, which lost the Lease of a
busy operator (its renewal thread and generated client starved behind the rounds
of 1,500 nodes) and which ended its thread silently on any error but an
``ApiException``, leaving the old leader acting.

The rules are :mod:`pitcrew.core.lease`'s: a Lease is taken once it stood
unchanged for its duration on this process's own clock; its holder acts only
within its :class:`~pitcrew.core.lease.Tenure`, the renew deadline after the
last renewal it *sent* that succeeded. A holder renews by writing over the Lease
it last wrote (one request per renewal); a 409 says the Lease changed under it,
and the turn's read says whether it is still the holder. A transient error is
retried on the next turn until the tenure runs out: then, or when the Lease
shows another holder, the shard is lost (``lost``), at once, and this replica
goes on leading its other shards and campaigning for all of them. Only when the
election's thread itself ends does the process exit (:func:`run_until_it_ends`).
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client

from pitcrew.core.lease import (
    ABSENT,
    Seen,
    Step,
    Tenure,
    Timing,
    fair_share,
    free,
    free_since,
    is_member_lease,
    member_lease,
    pool_lease,
    seen,
    step,
    surplus,
)
from pitcrew.kube import leases
from pitcrew.kube.client import is_transient

logger = logging.getLogger(__name__)
EXIT_ELECTION_ENDED = 4
Clock = Callable[[], float]
Wall = Callable[[], datetime.datetime]


def wall_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def ignore(_: str) -> None:
    """A Lease lost that the caller need not hear of."""


def ignore_won(_: str, __: str) -> None:
    """A Lease won that the caller need not hear of."""


STALE_MEMBER = 10
"""Lease durations after which another replica deletes a member Lease no one renews
(a pod of an old rollout): pod names change with every rollout, and their Leases
would pile up."""


class Elector:
    """Campaigns, as ``identity`` in ``namespace``, for the cluster shard's Lease
    ``cluster`` and a Lease for each pool (:meth:`campaign`), from the thread that
    calls :meth:`run`, and renews its member Lease; :meth:`leads` says, from any
    thread, whether this process may act for a shard now. ``won(lease, previous
    holder)`` and ``lost(lease)`` are called on the election's thread."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        cluster: str,
        identity: str,
        timing: Timing,
        won: Callable[[str, str], None] = ignore_won,
        lost: Callable[[str], None] = ignore,
        clock: Clock = time.monotonic,
        wall: Wall = wall_now,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.cluster = cluster
        self.identity = identity
        self.member = member_lease(cluster, identity)
        self.timing = timing
        self.won = won
        self.lost = lost
        self.clock = clock
        self.wall = wall
        self._pools: dict[str, str] = {}
        """Each pool's Lease campaigned for, by name: the policy it is for."""
        self._policies: dict[str, str] = {}
        """Every pool Lease ever campaigned for: the policy it is for (a pool's Lease is
        given back after its policy is gone)."""
        self._member = False
        """Whether this replica renews its member Lease: once it knows the pools, so
        that the others do not give it pools it would not take."""
        self._tenures: dict[str, Tenure] = {}
        self._held: dict[str, dict[str, Any]] = {}
        """Each Lease held, as the apiserver answered the last write of it."""
        self._seen: dict[str, Seen] = {}
        self._listed: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._turning = threading.Lock()

    def campaign(self, pools: Iterable[str]) -> None:
        """Campaign for the Leases of ``pools`` (their policies' names) from the next
        turn on, and give back those of pools gone (safe from any thread); from the
        first call on, this replica counts as a member."""
        self._pools = {pool_lease(self.cluster, p): p for p in pools}
        self._policies.update(self._pools)
        self._member = True

    def shards(self) -> tuple[str, ...]:
        return (self.cluster, *sorted(self._pools))

    def policy_of(self, lease: str) -> str | None:
        """The policy whose pool Lease ``lease`` is; None for the cluster shard's."""
        return self._policies.get(lease)

    def leads(self, name: str) -> bool:
        """Whether this process may act for Lease ``name`` now: within its tenure."""
        tenure = self._tenures.get(name)
        return tenure is not None and tenure.valid(self.clock())

    def leads_pool(self, policy: str) -> bool:
        return self.leads(pool_lease(self.cluster, policy))

    def leads_cluster(self) -> bool:
        return self.leads(self.cluster)

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
        """One turn: read the election (one LIST), renew what is held, give back what is
        no longer wanted or beyond the share of pools, take what is free and within it
        (the cluster shard whenever it is free)."""
        shards = self.shards()
        wanted = (self.member, *shards) if self._member else shards
        read = self._guarded("reading the election", self._read, wanted)
        for name in list(self._held):
            if name not in wanted:
                self._give_back(name)
            else:
                self._guarded(name, self._renew, name)
        if read:
            now = self.clock()
            pools = shards[1:]
            fair, others_under = self._share(pools, now)
            held = [name for name in pools if name in self._held]
            for name in wanted:
                if name not in self._held:
                    under = name not in pools or len(held) < fair
                    if self._guarded(name, self._campaign, name, under) and name in pools:
                        held.append(name)
            extra = surplus(held, fair=fair, others_under=others_under)
            if extra is not None:
                self._give_back(extra)
            self._guarded("deleting dead members' Leases", self._collect, now)
        for name in list(self._held):
            if not self.leads(name):
                self._lose(name, f"not renewed within {self.timing.renew_deadline:.0f}s")

    def release(self) -> None:
        """Stop campaigning and give back every Lease held, having stopped acting for
        it: a candidate takes it at once instead of waiting out its duration (a
        rollout, a clean stop)."""
        self._stop.set()
        with self._turning:
            for name in list(self._held):
                self._give_back(name)

    def _guarded(self, what: str, call: Callable[..., bool | None], *args: Any) -> bool:
        """``call``, its errors logged (a transient one as a warning): a turn goes on to
        the next Lease whatever one of them answered."""
        try:
            return bool(call(*args))
        except Exception as error:
            if is_transient(error):
                logger.warning("Lease %s/%s: %s; retried", self.namespace, what, error)
            else:
                logger.exception("Lease %s/%s failed; retried", self.namespace, what)
            return False

    def _read(self, wanted: tuple[str, ...]) -> bool:
        now = self.clock()
        timeout = self.timing.retry
        listing = leases.listed(self.api, self.namespace, self.cluster, timeout=timeout)
        found = {lease["metadata"]["name"]: lease for lease in listing}
        for name in wanted:
            if name not in found:  # new, or made before its label: read it alone
                lease = leases.read(self.api, self.namespace, name, timeout=timeout)
                if lease is not None:
                    found[name] = lease
        self._listed = found
        for name in set(self._seen) - set(found) - set(wanted):
            del self._seen[name]
        for name in {*found, *wanted}:
            record = leases.record(found[name]) if name in found else ABSENT
            self._seen[name] = seen(self._seen.get(name), record, now)
        return True

    def _share(self, pools: tuple[str, ...], now: float) -> tuple[int, bool]:
        """This replica's fair share of the ``pools``, and whether another live member
        leads fewer than that."""
        members = {
            lease.record.holder
            for name, lease in self._seen.items()
            if is_member_lease(self.cluster, name) and not free(lease, now)
        } | {self.identity}
        counts = Counter(
            self._seen[name].record.holder
            for name in pools
            if name in self._seen and not free(self._seen[name], now)
        )
        fair = fair_share(len(pools), len(members))
        return fair, any(counts[m] < fair for m in members - {self.identity})

    def _renew(self, name: str) -> bool:
        try:
            self._write(name, leases.replace, self._held[name])
        except client.ApiException as error:
            if error.status not in (404, 409):
                raise
            lease = self._listed.get(name)
            holder = leases.record(lease).holder if lease else ""
            if lease is None or holder != self.identity:
                self._lose(name, f"it changed under it ({holder or 'no one'} holds it)")
                return False
            # Its own write whose answer was lost: renewed over the version read.
            self._write(name, leases.replace, lease)
        return True

    def _campaign(self, name: str, under_share: bool) -> bool:
        """Create, take or renew Lease ``name`` as the take-over rule says; whether it
        is held now."""
        now = self.clock()
        lease = self._seen[name]
        match step(
            lease,
            identity=self.identity,
            now=now,
            under_share=under_share,
            patience=float(self.timing.lease),
        ):
            case Step.CREATE:
                self._write(name, leases.create, None)
            case Step.RENEW | Step.TAKE:
                self._write(name, leases.replace, self._listed[name])
            case Step.WAIT:
                return False
        return True

    def _collect(self, now: float) -> None:
        """Delete member Leases dead for :data:`STALE_MEMBER` Lease durations."""
        for name, lease in list(self._seen.items()):
            dead_for = now - free_since(lease)
            if (
                is_member_lease(self.cluster, name)
                and name != self.member
                and dead_for >= STALE_MEMBER * self.timing.lease
                and name in self._listed
            ):
                leases.delete(self.api, self._listed[name], timeout=self.timing.retry)
                logger.info("deleted the Lease %s/%s of a member gone", self.namespace, name)

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
            election=self.cluster,
            now=self.wall(),
            before=before,
        )
        previous = leases.record(before).holder if before else ""
        sent = self.clock()
        answer = call(self.api, body, timeout=self.timing.retry)
        tenure = self._tenures.setdefault(name, Tenure(self.timing.renew_deadline))
        fresh = name not in self._held
        self._held[name] = answer
        tenure.renewed(sent)
        if fresh:
            # The cluster Lease's line is the one an SRE greps for: "... is the leader".
            held = "is the leader, holding" if name == self.cluster else "holds"
            logger.info("%s %s the Lease %s/%s", self.identity, held, self.namespace, name)
            if name != self.member:
                self.won(name, previous)

    def _give_back(self, name: str) -> None:
        lease = self._held.pop(name)
        self._tenures[name].end()
        if name != self.member:
            self.lost(name)
        try:
            leases.replace(
                self.api, leases.given_back(lease, now=self.wall()), timeout=self.timing.retry
            )
            logger.info("%s gave back the Lease %s/%s", self.identity, self.namespace, name)
        except Exception as error:  # it runs out on its own
            logger.warning("giving back the Lease %s/%s: %s", self.namespace, name, error)

    def _lose(self, name: str, why: str) -> None:
        self._held.pop(name, None)
        self._tenures[name].end()
        logger.error("%s lost the Lease %s/%s: %s", self.identity, self.namespace, name, why)
        if name != self.member:
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
