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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


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
    """What a Lease says, as far as the election reads it."""

    holder: str
    duration: float
    transitions: int
    version: str
    """The resourceVersion: every write makes a new one, a renewal included."""


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


def free(lease: Seen, now: float) -> bool:
    """Whether a candidate may take the Lease: given back, or unchanged for its whole
    duration (its holder is gone or cannot reach the apiserver)."""
    return not lease.record.holder or now >= lease.since + lease.record.duration


class Step(Enum):
    """What a candidate does with a Lease on its turn."""

    CREATE = "create"
    RENEW = "renew"
    TAKE = "take"
    WAIT = "wait"


def step(lease: Seen | None, *, identity: str, now: float) -> Step:
    """The take-over rule: create a Lease no one has made; renew one that names this
    candidate (its own, or its own before a restart); take one that is free; else wait."""
    if lease is None:
        return Step.CREATE
    if lease.record.holder == identity:
        return Step.RENEW
    if free(lease, now):
        return Step.TAKE
    return Step.WAIT


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
