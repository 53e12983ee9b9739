"""The node lifecycle: one pure function from current state to next state and actions.

``decide`` reads a node (Node facts, its GPUNode status, the policy, a
snapshot of the fleet and the time) and returns the next operator-owned
status, the actions that get the cluster there, and when to decide again if
nothing happens meanwhile. It does no I/O and reads no clock, so it is tested
exhaustively without a cluster, and it is level-triggered: it never asks
"what just happened", only "what is true now". Running it again on the state
its own actions produced yields no action (idempotence), which is what makes a
restart or a new leader safe.

Phases, each with its handler in :data:`PHASES` (one module per group)::

    Pending -> Validating -> Healthy <-> Suspect                     in_service, validating
    Healthy/Suspect -> Quarantined -> Draining -> Remediating        draining
    Remediating -> Validating | Retired (ladder exhausted, or lemon)  remediating
    Healthy -> Suspect -> Draining -> Maintenance -> Validating      in_service (a window)
    Healthy <-> Spare;  any -> Excluded (opt-out label)              in_service

Every decision also notes the evidence itself (:mod:`.observe`), publishes the
policy's checks to the agent, runs periodic verification (:mod:`.periodic`) and
keeps Slurm in step (:mod:`.slurm`), whatever the phase.

Rules that keep production safe live here, next to the transitions they
guard: the circuit breaker and concurrency bounds (:mod:`pitcrew.core.safety`)
gate every transition that takes capacity away; a cordon made by anyone
else is never undone; a check that could not run (``error``) is never
evidence against a node. Remediation progress (action, step, attempt,
start) is status, so a half-done ladder resumes where it was.

What is decided is acted on only as far as it has been *observed*: a drain
begins (and its timeout starts) in a decision that sees Pitcrew's cordon in
place, and a remediation rung starts only in a decision that sees the cordon
and no workload left (or after the drain policy's explicit escalation). A
cordon and a reset are therefore never issued together, a pod bound just
before the cordon landed is seen before the reset, and a dry run, whose
cordon never lands, never gets past Quarantined. In a dry run no rung is
started or escalated either, so turning dry run off starts from real
progress only and dry-run attempts never count towards the lemon limit.

Every comparison of ``now`` with a deadline goes through the builder, which
keeps the earliest deadline still ahead as :attr:`Decision.wake_at`: the
operator's round loop and the simulator wake a node at it, and neither lists
the lifecycle's timers.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from pitcrew.api.gpunode import Phase
from pitcrew.api.meta import ConditionStatus
from pitcrew.core.lifecycle import in_service, periodic, slurm
from pitcrew.core.lifecycle.builder import Builder, Decision
from pitcrew.core.lifecycle.draining import draining, quarantined, suspect
from pitcrew.core.lifecycle.observe import HEARTBEAT_MISSES, observe, publish_checks
from pitcrew.core.lifecycle.probes import PROBE_ATTEMPTS
from pitcrew.core.lifecycle.remediating import remediating, retired
from pitcrew.core.lifecycle.service import hand_back
from pitcrew.core.lifecycle.validating import validating
from pitcrew.core.views import FleetView, NodeState, PolicyView

__all__ = ["HEARTBEAT_MISSES", "PHASES", "PROBE_ATTEMPTS", "Decision", "decide"]

PHASES: dict[Phase, Callable[[Builder], None]] = {
    Phase.PENDING: in_service.pending,
    Phase.VALIDATING: validating,
    Phase.HEALTHY: in_service.healthy,
    Phase.SPARE: in_service.spare,
    Phase.SUSPECT: suspect,
    Phase.QUARANTINED: quarantined,
    Phase.DRAINING: draining,
    Phase.REMEDIATING: remediating,
    Phase.MAINTENANCE: in_service.maintenance,
    Phase.RETIRED: retired,
    Phase.EXCLUDED: in_service.excluded,
}
"""The handler of each phase: what a node in that phase does next."""


def decide(
    *,
    state: NodeState,
    policy: PolicyView,
    fleet: FleetView,
    now: datetime.datetime,
    generation: int = 1,
    dry_run: bool = False,
) -> Decision:
    """The next status and the actions for one node. Pure: no I/O, no clock.

    ``dry_run`` (the policy's or the operator's) stops the ladder: no rung is
    started, retried or escalated, since none of it would be real."""
    b = Builder(
        state=state, policy=policy, fleet=fleet, now=now, generation=generation, dry_run=dry_run
    )
    b.set(policy=policy.name)
    observe(b)
    if state.node.opted_out:
        b.go(Phase.EXCLUDED, "OptedOut", "node is labelled pitcrew.dev/managed=false")
        hand_back(b)  # Pitcrew's cordon, taints, drain, rung and reservation undone
        slurm.sync(b)  # and its own Slurm drain
        return b.finish()
    publish_checks(b)
    if policy.spec.safety.paused:
        b.condition(
            "Paused",
            ConditionStatus.TRUE,
            "PolicyPaused",
            f"policy {policy.name} is paused: no decisions",
        )
        return b.finish()
    b.condition("Paused", ConditionStatus.FALSE, "PolicyActive")
    PHASES[state.status.phase](b)
    periodic.verification(b)
    slurm.sync(b)
    return b.finish()
