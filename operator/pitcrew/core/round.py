"""One round of decisions: each node decided in turn, on the pool the ones before it left.

The operator's round loop (:mod:`pitcrew.controller.rounds`) and the goodput
simulator (:mod:`pitcrew.simulate.control`) both decide through
:func:`decide_round`, so what the simulator prints is the operator's behaviour:
the same order (by name), the same lifecycle, the same counting of the pool after
each decision, the same wake-ups. A shell only reads its nodes (a watch cache, a
simulated world) and carries out the plans.

How a node counts in its pool, the two rules that keep ``maxUnhealthy`` and the
drain and remediation limits exact without a lock:

- Within a round (:func:`counted`), a node taken out counts at once, so two nodes
  failing in the same instant cannot both take the last slot; a node on its way
  back keeps its slot, since its write has not landed and may never (a refused
  write, a lapsed Lease).
- Across rounds (:func:`member`), a plan still being carried out counts with the
  status it intends, except that a node coming back counts as out until its write
  lands.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pitcrew.api.gpunode import GPUNodeStatus
from pitcrew.api.vocabulary import OUT_BY_PITCREW
from pitcrew.core.fleet import Summary, after_decision, summarize
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.views import FleetView, NodeState, PolicyView


@dataclass(frozen=True, kw_only=True)
class Due:
    """A node to decide, as its shell reads it now."""

    state: NodeState
    policy: PolicyView
    generation: int = 1
    dry_run: bool = False
    """The operator's or the policy's dry run: no rung is started (see ``decide``)."""


@dataclass(frozen=True, kw_only=True)
class Decided:
    node: str
    policy: PolicyView
    before: GPUNodeStatus
    decision: Decision

    @property
    def changes(self) -> bool:
        """Carrying it out does something: an action, or a new status to write."""
        return bool(self.decision.actions) or self.decision.status != self.before


@dataclass(frozen=True, kw_only=True)
class Round:
    decided: tuple[Decided, ...]
    deferred: tuple[str, ...] = ()
    """Nodes not decided because ``limit`` decisions already change something."""
    fleets: dict[str, FleetView] = field(default_factory=dict)
    """Each pool the round touched, as its decisions leave it."""


def decide_round(
    names: Iterable[str],
    *,
    read: Callable[[str], Due | None],
    fleet: Callable[[str], FleetView],
    now: datetime.datetime,
    limit: int | None = None,
) -> Round:
    """Decide ``names`` in name order. ``read`` gives a node's :class:`Due` (None: not
    decided now, the shell says why); ``fleet`` a pool as it stands before the round.
    Past ``limit`` decisions that change something, the rest are deferred."""
    decided: list[Decided] = []
    deferred: list[str] = []
    fleets: dict[str, FleetView] = {}
    acting = 0
    for name in sorted(names):
        if limit is not None and acting >= limit:
            deferred.append(name)
            continue
        due = read(name)
        if due is None:
            continue
        pool = due.policy.name
        before = fleets[pool] if pool in fleets else fleet(pool)
        decision = decide(
            state=due.state,
            policy=due.policy,
            fleet=before,
            now=now,
            generation=due.generation,
            dry_run=due.dry_run,
        )
        done = Decided(node=name, policy=due.policy, before=due.state.status, decision=decision)
        decided.append(done)
        if done.changes:
            acting += 1
            fleets[pool] = counted(before, node=name, before=due.state.status, decision=decision)
        else:
            fleets[pool] = before
    return Round(decided=tuple(decided), deferred=tuple(deferred), fleets=fleets)


def counted(fleet: FleetView, *, node: str, before: GPUNodeStatus, decision: Decision) -> FleetView:
    """The pool after ``decision`` within a round: a node taken out counts at once; a
    node on its way back keeps its slot until its write lands (:func:`member`)."""
    if before.phase in OUT_BY_PITCREW and decision.status.phase not in OUT_BY_PITCREW:
        return fleet
    return after_decision(fleet, node=node, before=before, decision=decision)


def member(stored: Summary, intended: GPUNodeStatus | None) -> Summary:
    """How a node counts in its pool when a plan for it may be in flight: with the
    status the plan intends, except that a node coming back (Remediating to
    Validating, say) counts as out until its write lands."""
    if intended is None:
        return stored
    planned = summarize(intended)
    coming_back = stored.phase in OUT_BY_PITCREW and planned.phase not in OUT_BY_PITCREW
    return stored if coming_back else planned
