"""Fleet arithmetic: a pool counted from its members, and moved by one decision.

:func:`fleet_of` counts a pool from its members' summaries (Excluded nodes are
not in it; spares oldest first), and :class:`Tally` keeps the same count as members
change one at a time. :func:`after_decision` moves one node from its
old phase to its new one (and a spare released or reserved out of the spare list): the
round (:mod:`pitcrew.core.round`) applies it after each decision that changes
something, so the next node of the round sees the pool as the decisions before
it left it, and says when a node coming back keeps its slot.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from pitcrew.api.gpunode import GPUNodeStatus, Phase, Transition
from pitcrew.api.vocabulary import MAINTENANCE_REASON, TAKEN_OUT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import Decision
from pitcrew.core.views import FleetView

_EPOCH = datetime.datetime.min.replace(tzinfo=datetime.UTC)


class Summary(NamedTuple):
    """What the fleet view needs from one GPUNode status (cached per resourceVersion)."""

    phase: Phase
    refused: bool
    """Held in service by the circuit breaker."""
    since: datetime.datetime | None
    heartbeat: datetime.datetime | None
    verifying: bool = False
    """A periodic verification is in flight."""
    history: tuple[Transition, ...] = ()
    """Its phase transitions (the accountant books GPU time by them)."""
    reason: str = ""
    """Why it is in its phase (``status.reason``), for ``pitcrew_gpunode_info``."""
    leaving_for_maintenance: bool = False
    """Taken out (Suspect, Draining) for a maintenance window, not for a fault."""
    reservation: str = ""
    """The training job it is reserved for (``status.reservation``), if any."""


def verifying(status: GPUNodeStatus) -> bool:
    return status.verification is not None and bool(status.verification.job)


def leaving_for_maintenance(status: GPUNodeStatus) -> bool:
    """On its way out of service for a maintenance window (taken out, or draining, with
    reason ``Maintenance``): it spends the maintenance budget, not ``maxUnhealthy``.
    Once drained it is in phase Maintenance, counted by phase."""
    return status.phase in TAKEN_OUT and status.reason == MAINTENANCE_REASON


def draining_for_maintenance(status: GPUNodeStatus) -> bool:
    """Draining for a maintenance window: it takes a window's drain slot, not a fault's."""
    return status.phase is Phase.DRAINING and leaving_for_maintenance(status)


def summarize(status: GPUNodeStatus) -> Summary:
    refused = any(
        c.type == "Admitted" and c.reason == "CircuitBreakerOpen" for c in status.conditions
    )
    return Summary(
        status.phase,
        refused,
        status.phase_since,
        status.last_heartbeat,
        verifying(status),
        tuple(status.history),
        status.reason,
        leaving_for_maintenance=leaving_for_maintenance(status),
        reservation=reservation(status),
    )


def reservation(status: GPUNodeStatus) -> str:
    return status.reservation.job if status.reservation is not None else ""


def counted_in_fleet(summary: Summary) -> tuple[object, ...]:
    """What of a summary :func:`fleet_of` reads: when it is unchanged, so is the fleet."""
    return (
        summary.phase,
        summary.refused,
        summary.since,
        summary.verifying,
        summary.leaving_for_maintenance,
        summary.reservation,
    )


def fleet_of(members: Iterable[tuple[str, Summary]]) -> FleetView:
    """The fleet of one pool from its members' summaries; Excluded nodes are not in it.
    Spares are listed oldest first, so the longest-rested spare is released first."""
    tally = Tally()
    for name, summary in members:
        tally.set(name, summary)
    return tally.view()


class Tally:
    """A pool's counts, kept as its members change one at a time: the round loop's
    fleet at thousands of nodes, where walking every member for each round that
    follows a write (a burst's hundreds of rounds) cost the operator more than the
    decisions. :meth:`view` is :func:`fleet_of` of the members set so far."""

    def __init__(self) -> None:
        self.members: dict[str, Summary] = {}
        self._phases: Counter[Phase] = Counter()
        self._spares: dict[str, datetime.datetime] = {}
        self._reserved: Counter[str] = Counter()
        self._total = self._refused = self._verifying = self._leaving = self._drains = 0
        self._view: FleetView | None = None

    def set(self, name: str, summary: Summary | None) -> None:
        """``name`` counted as ``summary`` from now on; None: no longer a member."""
        old = self.members.pop(name, None)
        if old is not None:
            self._count(name, old, -1)
        if summary is not None:
            self.members[name] = summary
            self._count(name, summary, +1)
        self._view = None

    def _count(self, name: str, summary: Summary, sign: int) -> None:
        if summary.phase is Phase.EXCLUDED:
            return
        self._total += sign
        self._phases[summary.phase] += sign
        self._refused += sign * summary.refused
        self._verifying += sign * summary.verifying
        self._leaving += sign * summary.leaving_for_maintenance
        if summary.reservation:
            self._reserved[summary.reservation] += sign
        self._drains += sign * (summary.leaving_for_maintenance and summary.phase is Phase.DRAINING)
        if summary.phase is Phase.SPARE:
            if sign > 0:
                self._spares[name] = summary.since or _EPOCH
            else:
                self._spares.pop(name, None)

    def view(self) -> FleetView:
        if self._view is None:
            spares = sorted((since, name) for name, since in self._spares.items())
            self._view = FleetView(
                total=self._total,
                phases={p: n for p, n in self._phases.items() if n > 0},
                spares=tuple(n for _, n in spares),
                refused=self._refused,
                verifying=self._verifying,
                leaving_for_maintenance=self._leaving,
                reserved={job: n for job, n in self._reserved.items() if n > 0},
                draining_for_maintenance=self._drains,
            )
        return self._view


def after_decision(
    fleet: FleetView, *, node: str, before: GPUNodeStatus, decision: Decision
) -> FleetView:
    """The fleet once ``decision`` for ``node`` is carried out."""
    phases = dict(fleet.phases)
    phases[before.phase] = phases.get(before.phase, 1) - 1
    phases[decision.phase] = phases.get(decision.phase, 0) + 1
    released = {x.node for x in decision.actions if isinstance(x, a.ReleaseSpare | a.ReserveSpare)}
    reserved = Counter(fleet.reserved)
    reserved.subtract([j] if (j := reservation(before)) else [])
    reserved.update([j] if (j := reservation(decision.status)) else [])
    # A spare reserved by another node's decision records it in its own status later.
    reserved.update(x.job for x in decision.actions if isinstance(x, a.ReserveSpare))
    spares = [s for s in fleet.spares if s not in released]
    if decision.phase is not Phase.SPARE:
        spares = [s for s in spares if s != node]
    elif node not in spares:
        spares.append(node)  # the newest spare: released last, as fleet_of orders them
    return FleetView(
        total=fleet.total,
        phases=phases,
        spares=tuple(spares),
        refused=fleet.refused,
        verifying=fleet.verifying - verifying(before) + verifying(decision.status),
        leaving_for_maintenance=fleet.leaving_for_maintenance
        - leaving_for_maintenance(before)
        + leaving_for_maintenance(decision.status),
        reserved={job: n for job, n in reserved.items() if n > 0},
        draining_for_maintenance=fleet.draining_for_maintenance
        - draining_for_maintenance(before)
        + draining_for_maintenance(decision.status),
    )
