"""A node the resync may skip: in service, clean evidence, no timer running; until its
earliest deadline (agent heartbeat, verification due, maintenance lead), five minutes
at most."""

from __future__ import annotations

import datetime
from dataclasses import replace

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import GPUNodeStatus, Phase, VerificationStatus
from pitcrew.core.evidence import WATCH_ESCALATES_AFTER
from pitcrew.core.lifecycle import HEARTBEAT_MISSES, Decision, decide
from pitcrew.core.rest import REST_MAX, fleet_signature, quiet_until
from pitcrew.core.verification import POD_GRACE
from pitcrew.core.views import MaintenanceView, NodeState, NodeView, PolicyView
from support.lifecycle_data import T0, finding, fleet, node, policy, report, state, status

MINUTE = datetime.timedelta(minutes=1)


def settled(
    view: NodeView, current: GPUNodeStatus, spec: PolicyView, now: datetime.datetime
) -> tuple[NodeState, Decision]:
    """The node decided twice: the second decision is the one a resync would repeat."""
    first = decide(state=state(view, current), policy=spec, fleet=fleet(), now=now)
    again = state(view, first.status)
    return again, decide(state=again, policy=spec, fleet=fleet(), now=now)


def test_a_healthy_node_rests_five_minutes_or_until_its_agent_would_be_missed() -> None:
    spec = policy()
    fresh, decision = settled(node(), status(Phase.HEALTHY), spec, T0)
    assert decision.actions == ()
    assert decision.status == fresh.status
    assert quiet_until(fresh.status, decision, T0) == T0 + REST_MAX
    late = T0 + 13 * MINUTE  # the last report is 13 minutes old: missed at 15
    old, decision = settled(node(), status(Phase.HEALTHY), spec, late)
    assert (
        quiet_until(old.status, decision, late)
        == T0 + spec.spec.checks.heartbeat * HEARTBEAT_MISSES
    )


def test_a_node_whose_agent_was_missed_rests_too_once_that_is_said() -> None:
    """10,000 nodes whose agents stopped must not be decided every resync: the missed
    heartbeat is in their status after one decision; a new report is an event."""
    spec = policy()
    late = T0 + 20 * MINUTE
    missed, decision = settled(node(), status(Phase.HEALTHY), spec, late)
    reporting = next(c for c in decision.status.conditions if c.type == "AgentReporting")
    assert reporting.reason == "HeartbeatMissing"
    assert decision.actions == ()
    assert quiet_until(missed.status, decision, late) == late + REST_MAX


def test_a_node_rests_until_the_deadline_its_decision_reports() -> None:
    """The lifecycle says when time alone may change a decision (``wake_at``): a watch
    finding escalates in an hour, a verification's probe pod must be on the node within
    its grace; the rest is capped at five minutes."""
    spec = policy()
    watched = report(finding(FaultClass.WATCH, name="ecc-correctable"))
    late = T0 + 20 * MINUTE  # its agent's heartbeat is missed already: no deadline there
    then, decision = settled(node(), status(Phase.HEALTHY, checks=watched), spec, late)
    assert decision.wake_at == late + WATCH_ESCALATES_AFTER
    assert quiet_until(then.status, decision, late) == late + REST_MAX
    in_flight = VerificationStatus(job="pitcrew-verify-gpu-node-0001-1", started_at=T0)
    then, decision = settled(node(), status(Phase.HEALTHY, verification=in_flight), spec, T0)
    assert quiet_until(then.status, decision, T0) == T0 + POD_GRACE


def test_a_node_in_motion_or_held_by_its_pool_never_rests() -> None:
    spec = policy()
    then, decision = settled(node(), status(Phase.DRAINING), spec, T0)
    assert quiet_until(then.status, decision, T0) is None  # drain timeouts, pods leaving
    failing = report(finding(FaultClass.DEGRADED))
    then, decision = settled(node(), status(Phase.HEALTHY, checks=failing), spec, T0)
    assert decision.status.phase is not Phase.HEALTHY or decision.actions
    assert quiet_until(then.status, decision, T0) is None
    full = fleet(quarantined=1)  # the default 10 % of 10 nodes: one out already
    held = decide(
        state=state(node(), status(Phase.HEALTHY, checks=failing)), policy=spec, fleet=full, now=T0
    )
    assert held.held
    assert held.status.phase is Phase.HEALTHY


def test_a_due_verification_or_a_coming_window_ends_the_rest() -> None:
    spec = policy(validation={"periodic": {"enabled": True, "interval": "1h"}})
    due = VerificationStatus(next=T0 + 2 * MINUTE)
    then, decision = settled(node(), status(Phase.HEALTHY, verification=due), spec, T0)
    assert quiet_until(then.status, decision, T0) == T0 + 2 * MINUTE
    plain = policy()
    lead = plain.spec.safety.drain.checkpoint_max_delay
    window = MaintenanceView("MaintenanceWindow/bios", start=T0 + lead + 3 * MINUTE, end=None)
    then, decision = settled(replace(node(), maintenance=window), status(Phase.HEALTHY), plain, T0)
    assert quiet_until(then.status, decision, T0) == T0 + 3 * MINUTE


def test_the_signature_moves_only_with_what_a_resting_node_reads_of_its_pool() -> None:
    without_spares = policy()
    assert fleet_signature(fleet(), without_spares) == fleet_signature(
        fleet(quarantined=2, draining=1), without_spares
    )  # faults elsewhere: nothing a resting node decides by
    holding_two = policy(spares={"count": 2})
    base = fleet(spares=("n1", "n2"), spare=2)
    assert fleet_signature(base, holding_two) == fleet_signature(
        replace(base, verifying=1, refused=1), holding_two
    )
    for other in (
        fleet(spares=("n1",), spare=1),
        fleet(spares=("n1", "n2"), spare=2, quarantined=1),
    ):
        assert fleet_signature(other, holding_two) != fleet_signature(base, holding_two)
