"""Every deadline a decision compares ``now`` with is its wake-up (``Decision.wake_at``).

No shell lists the lifecycle's timers: the round loop and the simulator decide a node
again at ``wake_at``. So each timed rule must report its deadline, and deciding just
past it must do what the rule says.
"""

from __future__ import annotations

import datetime

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import DrainStatus, GPUNodeStatus, Phase, RemediationStatus
from pitcrew.api.policy import RUNG_TIMEOUT_FALLBACK, RemediationAction
from pitcrew.api.vocabulary import QUARANTINE_TAINT, VALIDATING_TAINT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.views import NodeView, PolicyView
from support.lifecycle_data import (
    T0,
    finding,
    fleet,
    node,
    pitcrew_cordoned,
    pod,
    policy,
    report,
    status,
)
from support.lifecycle_data import state as state_of

SECOND = datetime.timedelta(seconds=1)
LATER = T0 + datetime.timedelta(minutes=2)
"""When the decisions below are taken: the agent's last report (T0) is still fresh."""


def decided(
    view: NodeView, current: GPUNodeStatus, spec: PolicyView, now: datetime.datetime
) -> Decision:
    return decide(state=state_of(view, current), policy=spec, fleet=fleet(), now=now)


def test_a_suspect_node_wakes_when_its_checkpoint_wait_ends() -> None:
    spec = policy()
    view = pitcrew_cordoned(node(pods=(pod("w-0"),)), QUARANTINE_TAINT)
    suspect = status(Phase.SUSPECT, checks=report(finding(FaultClass.DEGRADED)), reason="Xid")
    deadline = T0 + spec.spec.safety.drain.checkpoint_max_delay
    assert decided(view, suspect, spec, LATER).wake_at == deadline
    past = decided(view, suspect, spec, deadline)
    assert past.phase is Phase.DRAINING


def test_a_drain_wakes_at_its_timeout_unless_it_waits_for_ever() -> None:
    spec = policy(safety={"drain": {"onTimeout": "escalate"}})
    view = pitcrew_cordoned(node(pods=(pod("w-0"),)), QUARANTINE_TAINT)
    draining = status(
        Phase.DRAINING,
        checks=report(finding(FaultClass.FATAL)),
        reason="Xid",
        drain=DrainStatus(started_at=T0),
    )
    deadline = T0 + spec.spec.safety.drain.timeout
    assert decided(view, draining, spec, LATER).wake_at == deadline
    past = decided(view, draining, spec, deadline + SECOND)
    assert past.phase is Phase.REMEDIATING
    waiting = policy(safety={"drain": {"onTimeout": "wait"}})
    assert decided(view, draining, waiting, LATER).wake_at is None


def test_a_rung_wakes_at_its_timeout_and_a_rung_no_longer_on_the_ladder_gets_the_fallback() -> None:
    spec = policy()
    view = pitcrew_cordoned(node(), QUARANTINE_TAINT)
    rung = RemediationStatus(
        action=RemediationAction.RESET_GPU,
        fault_class=FaultClass.FATAL,
        step=0,
        attempt=1,
        started_at=T0,
        reference="fix-1",
    )
    remediating = status(
        Phase.REMEDIATING, checks=report(finding(FaultClass.FATAL)), remediation=rung
    )
    timeout = spec.spec.remediation.ladders.fatal[0].timeout
    assert decided(view, remediating, spec, LATER).wake_at == T0 + timeout
    # The policy was edited while a fourth rung ran: the ladder has three. The repair was
    # started for real: it gets a step's default time, it is not escalated at once.
    gone = remediating.model_copy(update={"remediation": rung.model_copy(update={"step": 3})})
    now = decided(view, gone, spec, LATER)
    assert now.phase is Phase.REMEDIATING
    assert not any(isinstance(x, a.Remediate) for x in now.actions)
    assert now.wake_at == T0 + RUNG_TIMEOUT_FALLBACK


def test_a_validation_wakes_when_its_probe_times_out() -> None:
    spec = policy()
    view = pitcrew_cordoned(node(), VALIDATING_TAINT)
    validating = status(Phase.VALIDATING, probe_job="pitcrew-probe-gpu-node-0001-1")
    deadline = T0 + spec.spec.validation.timeout
    assert decided(view, validating, spec, LATER).wake_at == deadline


def test_a_breaker_cooldown_is_the_wake_up_of_the_node_it_holds() -> None:
    cooldown = T0 + datetime.timedelta(minutes=10)
    spec = policy()
    held = PolicyView(name=spec.name, created=spec.created, spec=spec.spec, cooldown_until=cooldown)
    failing = status(Phase.HEALTHY, checks=report(finding(FaultClass.FATAL)))
    decision = decided(node(), failing, held, LATER)
    assert decision.phase is Phase.HEALTHY
    assert decision.held
    assert decision.wake_at == cooldown
    assert decided(node(), failing, held, cooldown).phase is Phase.QUARANTINED


def test_the_agents_heartbeat_is_a_report_due_not_a_wake_up() -> None:
    spec = policy()
    decision = decided(node(), status(Phase.HEALTHY), spec, LATER)
    assert decision.report_due == T0 + spec.spec.checks.heartbeat * 3
    assert decision.wake_at is None
