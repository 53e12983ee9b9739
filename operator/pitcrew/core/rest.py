"""When a node's decision cannot change by time alone: how long the resync may skip it.

Every event about a node (its Node, its pods, its GPUNode, a policy, a window, a
budget) queues a decision at once; the periodic resync exists for what changes
with no event: a drain's timeout, a rung's timeout, a checkpoint wait, an agent
that stopped reporting, a verification coming due. A node in service with clean
evidence has none of those pending except the last two, and both have a time
known in advance. Deciding such a node every resync changes nothing and, at
10,000 nodes and a 15-second resync, costs the operator about 700 decisions a
second; skipping it until its earliest deadline costs nothing but a map of times.

A node rests only while what it reads of its pool stays as it was when it was
decided (the round loop compares :func:`fleet_signature`): whether the pool holds
fewer or more spares than it wants. A fault elsewhere that changes that brings the
whole pool back into the resync; one that does not (no spares configured, the
usual case) leaves the resting nodes resting. :data:`REST_MAX` bounds every
rest, so a rule this module does not know of is late by minutes at most.
"""

from __future__ import annotations

import datetime
from collections.abc import Hashable

from gpuhealth.report import CheckStatus
from pitcrew.api.vocabulary import IN_SERVICE, UNHEALTHY
from pitcrew.core.lifecycle import HEARTBEAT_MISSES, Decision
from pitcrew.core.views import FleetView, NodeState, PolicyView

REST_MAX = datetime.timedelta(minutes=5)
"""The longest a node goes undecided without an event (the agents' default heartbeat
brings one every 5 minutes anyway)."""


def quiet_until(
    state: NodeState, decision: Decision, policy: PolicyView, now: datetime.datetime
) -> datetime.datetime | None:
    """Until when deciding ``state`` again, with no event in between, would decide the
    same (``decision``); None when time may change it at any moment."""
    status = decision.status
    node = state.node
    if decision.actions or status != state.status or status.phase not in IN_SERVICE:
        return None
    if status.watching or state.straggler or node.validation_requested:
        return None  # a finding on a timer, or a request waiting for the node to idle
    if any(c.status is CheckStatus.FAIL for c in status.checks.results):
        return None  # a failing check the breaker holds in service: cooldowns end
    if status.verification is not None and status.verification.job:
        return None  # a verification in flight times out
    deadlines = [now + REST_MAX]
    missed_at = (
        status.last_heartbeat + policy.spec.checks.heartbeat * HEARTBEAT_MISSES
        if status.last_heartbeat is not None
        else None
    )
    if missed_at is not None and missed_at > now:
        # Past it, the decision has said so (AgentReporting=False) and only a report,
        # an event, changes that: a fleet whose agents all died rests like any other.
        deadlines.append(missed_at)
    verification = status.verification
    if policy.spec.validation.periodic.enabled and verification and verification.next:
        deadlines.append(verification.next)
    if node.maintenance is not None:
        deadlines.append(node.maintenance.start - policy.spec.safety.drain.checkpoint_max_delay)
    until = min(deadlines)
    return until if until > now else None


def fleet_signature(fleet: FleetView, policy: PolicyView) -> Hashable:
    """What of its pool a resting node's decision reads: whether spares are short or
    over (``_healthy``, ``_spare``). The breaker, the drain and remediation limits
    and the verification slots are read only by nodes in motion, with a finding or
    with a verification due, none of which rests. Equal signatures, same decision."""
    wanted = max(0, policy.spec.spares.count - fleet.count(*UNHEALTHY))
    return (len(fleet.spares), wanted)
