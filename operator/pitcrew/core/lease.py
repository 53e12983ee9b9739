"""The Lease rules of leader election, apart from the requests that carry them out.

A candidate never compares the Lease's ``renewTime`` with its own clock: the
holder's clock and the candidate's may disagree by any amount. Like client-go's
``leaderelection``, a candidate notes *when it first saw* the Lease as it is now
(its resourceVersion) on its own monotonic clock, and the Lease is free once it
has stayed unchanged for its ``leaseDurationSeconds`` since: the holder renews
well within that (every :attr:`Timing.retry` seconds, each renewal a new
resourceVersion), so a Lease that stood still that long has no live holder. An
empty ``holderIdentity`` is a Lease given back (:func:`released`): free at once.

The holder keeps its own account of how long it may act (:class:`Tenure`):
until :attr:`Timing.renew_deadline` after it *sent* the last renewal that
succeeded. A candidate cannot take the Lease before ``leaseDurationSeconds``
after that renewal *landed*, later still, so the two never act at once; the
difference is the margin for writes already in flight.

Shards (design 017): the operator campaigns for a Lease per pool and one for the
cluster-wide work, and each replica keeps a member Lease of its own so the others
know it is there. A replica takes a free pool only while it leads fewer pools
than its fair share (:func:`fair_share`), or once the pool has gone unled for
another Lease duration (a member that is alive but does not take it); one leading
more than its share gives one back while another member leads fewer
(:func:`surplus`). The cluster shard is outside the share: whoever finds it free
takes it. Two replicas and two pools so settle one pool each, and a replica that
dies moves only its own shards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pitcrew.core.names import bounded_name


@dataclass(frozen=True)
class Timing:
    """The election's periods, all from the Lease duration (client-go's ratios)."""

    lease: int
    """Seconds a Lease holds without renewal: a candidate takes it over this long
    after it last changed."""

    @property
    def renew_deadline(self) -> float:
        """Seconds after a renewal was sent that its holder may act: two thirds of the
        Lease, so a third of it is margin against the candidates."""
        return float(max(self.lease * 2 // 3, 2))

    @property
    def retry(self) -> float:
        """Seconds between tries: a holder renews this often (three tries within the
        renew deadline), a candidate looks this often."""
        return float(max(int(self.renew_deadline) // 3, 1))


@dataclass(frozen=True)
class Record:
    """What a Lease says, as far as the election reads it; a Lease that does not exist
    is :data:`ABSENT`."""

    holder: str
    duration: float
    transitions: int
    version: str
    """The resourceVersion: every write makes a new one, a renewal included."""


ABSENT = Record(holder="", duration=0.0, transitions=0, version="")


@dataclass(frozen=True)
class Seen:
    """A Lease as this candidate last saw it, and since when (its own monotonic clock)."""

    record: Record
    since: float


def seen(before: Seen | None, record: Record, now: float) -> Seen:
    """The Lease seen at ``now``: the time it was first seen so is kept while it has
    not changed, and starts again whenever it has."""
    if before is not None and before.record.version == record.version:
        return before
    return Seen(record, now)


def free_since(lease: Seen) -> float:
    """From when a candidate may take the Lease: at once when it is absent or given
    back (no holder), else once it stood unchanged for its whole duration (its holder
    is gone or cannot reach the apiserver)."""
    if not lease.record.holder:
        return lease.since
    return lease.since + lease.record.duration


def free(lease: Seen, now: float) -> bool:
    return now >= free_since(lease)


class Step(Enum):
    """What a candidate does with a Lease on its turn."""

    CREATE = "create"
    RENEW = "renew"
    TAKE = "take"
    WAIT = "wait"


def step(lease: Seen, *, identity: str, now: float, under_share: bool, patience: float) -> Step:
    """The take-over rule: renew a Lease that names this candidate (its own, or its
    own before a restart); create one no one has made, or take one that is free, while
    this candidate holds less than its share, or whatever it holds once the Lease has
    been free ``patience`` seconds more (no other member took it); else wait."""
    if lease.record.holder == identity:
        return Step.RENEW
    if not free(lease, now):
        return Step.WAIT
    if not under_share and now < free_since(lease) + patience:
        return Step.WAIT
    return Step.TAKE if lease.record.version else Step.CREATE


def fair_share(shards: int, members: int) -> int:
    """Shards one member should lead at most: all of them split among the members
    alive, rounded up so that every shard has a place."""
    return math.ceil(shards / max(members, 1))


def surplus(held: Sequence[str], *, fair: int, others_under: bool) -> str | None:
    """The pool Lease to give back this turn, if any: one (the last by name) while
    this member leads more pools than its share and another member leads fewer, who
    will take it; one a turn, so that the others' counts catch up."""
    if len(held) <= fair or not others_under:
        return None
    return sorted(held)[-1]


def pool_lease(cluster: str, policy: str) -> str:
    """The Lease of the pool of GPUHealthPolicy ``policy``, beside the cluster shard's
    Lease ``cluster``."""
    return bounded_name(f"{cluster}-pool-{policy}", 253)


def member_lease(cluster: str, identity: str) -> str:
    """The Lease a replica renews to say it is alive and may take shards."""
    return bounded_name(f"{cluster}-member-{identity}", 253)


def is_member_lease(cluster: str, name: str) -> bool:
    return name.startswith(f"{cluster}-member-")


class Tenure:
    """How long the holder of one Lease may still act, on its own monotonic clock:
    until ``window`` (:attr:`Timing.renew_deadline`) after it sent the last renewal
    that succeeded. Ended at once (:meth:`end`) when the holder learns it lost the
    Lease or gives it back."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.until = -math.inf

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at ``sent_at`` succeeded (a late answer to an older one never
        shortens the tenure a newer one bought)."""
        self.until = max(self.until, sent_at + self.window)

    def end(self) -> None:
        self.until = -math.inf

    def valid(self, now: float) -> bool:
        return now < self.until
