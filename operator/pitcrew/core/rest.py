"""When a node's decision cannot change by time alone: how long the resync may skip it.

Every event about a node (its Node, its pods, its GPUNode, a policy, a window, a
budget) queues a decision at once; the periodic resync exists for what changes
with no event, and every such deadline is in the decision itself
(:attr:`~pitcrew.core.lifecycle.Decision.wake_at`): an agent that stops
reporting, a verification coming due, a window about to start, a watched finding
escalating. Deciding a node in service that has none due changes nothing and, at
10,000 nodes and a 15-second resync, costs the operator about 700 decisions a
second; skipping it until its wake-up costs nothing but a map of times.

A node rests only while what it reads of its pool stays as it was when it was
decided (the round loop compares :func:`fleet_signature`): whether the pool holds
fewer or more spares than it wants. A fault elsewhere that changes that brings the
whole pool back into the resync; one that does not (no spares configured, the
usual case) leaves the resting nodes resting. A node a bound of its pool holds
(``Decision.held``) never rests. :data:`REST_MAX` bounds every rest.
"""

from __future__ import annotations

import datetime
from collections.abc import Hashable

from pitcrew.api.gpunode import GPUNodeStatus
from pitcrew.api.vocabulary import IN_SERVICE
from pitcrew.core.lifecycle import Decision
from pitcrew.core.views import FleetView, PolicyView

REST_MAX = datetime.timedelta(minutes=5)
"""The longest a node goes undecided without an event (the agents' default heartbeat
brings one every 5 minutes anyway)."""


def quiet_until(
    before: GPUNodeStatus, decision: Decision, now: datetime.datetime
) -> datetime.datetime | None:
    """Until when deciding a node again (its status ``before`` the decision), with no
    event in between, would decide the same (``decision``): its wake-up,
    :data:`REST_MAX` at most; None when it may change at any resync (it acts, it is
    out of service, or a bound of its pool holds it)."""
    if decision.actions or decision.status != before or decision.held:
        return None
    if decision.status.phase not in IN_SERVICE:
        return None  # in motion: a drain, a rung, a probe, each watched at every resync
    deadlines = (decision.wake_at, decision.report_due, now + REST_MAX)
    return min(t for t in deadlines if t is not None)


def fleet_signature(fleet: FleetView, policy: PolicyView) -> Hashable:
    """What of its pool a resting node's decision reads: whether spares are short or
    over (``in_service.healthy``, ``in_service.spare``), and the nodes reserved for
    each job (a spare lends itself to a job that waits for more). The breaker, the drain and
    remediation limits and the verification slots are read only by nodes in motion,
    with a finding or with a verification due, none of which rests. Equal signatures,
    same decision."""
    wanted = fleet.spares_wanted(policy.spec.spares.count)
    return (len(fleet.spares), wanted, tuple(sorted(fleet.reserved.items())))
