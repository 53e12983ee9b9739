"""One decision under construction: the next status, the actions, the next wake-up.

Every phase handler of the lifecycle writes into a :class:`Builder` and never
returns anything: the builder is the one place where a phase change becomes a
history entry and an Event, where a cordon is planned at most once, where the
conditions are stamped with ``observedGeneration``, and where every deadline a
handler compared ``now`` with is kept as the decision's next wake-up
(controller-runtime's ``Result.RequeueAfter``). A shell needs nothing else to
know when to decide a node again: it never lists the lifecycle's timers.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from pitcrew.api.gpunode import HISTORY_LIMIT, GPUNodeStatus, Phase, Transition
from pitcrew.api.meta import Condition, ConditionStatus
from pitcrew.api.vocabulary import IN_SERVICE, QUARANTINE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.safety import Admission
from pitcrew.core.views import FleetView, NodeState, PolicyView


@dataclass(frozen=True, kw_only=True)
class Decision:
    status: GPUNodeStatus
    actions: tuple[a.Action, ...] = ()
    wake_at: datetime.datetime | None = None
    """The earliest deadline this decision compared ``now`` with and has not reached:
    deciding again before it, with no event in between, decides the same; None when
    only an event (a report, a pod, an edit, the fleet) can change the decision."""
    report_due: datetime.datetime | None = None
    """When the node's agent counts as missing (``AgentReporting`` False) unless it
    reports before: apart from ``wake_at`` because a report, an event, normally comes
    first. A shell that models a living agent as always reporting (the simulator)
    ignores it; the operator rests a node until the earlier of the two."""
    held: bool = False
    """A bound of the pool (the breaker, a drain, remediation or verification slot)
    refused a step: the decision may change whenever the pool does."""

    @property
    def phase(self) -> Phase:
        return self.status.phase


class Builder:
    """Accumulates one decision: the next status, the actions and the wake-up."""

    def __init__(
        self,
        *,
        state: NodeState,
        policy: PolicyView,
        fleet: FleetView,
        now: datetime.datetime,
        generation: int,
        dry_run: bool,
    ) -> None:
        self.state, self.policy, self.fleet, self.now = state, policy, fleet, now
        self.node = state.node
        self.status = state.status
        self.generation = generation
        self.dry_run = dry_run
        self.actions: list[a.Action] = []
        self.conditions: dict[str, tuple[ConditionStatus, str, str]] = {}
        self.wake_at: datetime.datetime | None = None
        self.report_due: datetime.datetime | None = None
        self.held = False

    def wake(self, at: datetime.datetime | None) -> None:
        """Keep ``at`` as a deadline the decision depends on, if it is still ahead."""
        if at is not None and at > self.now and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at

    def refused(self, admission: Admission) -> None:
        """A bound of the pool refused a step: said in the ``Admitted`` condition; the
        decision waits on the pool, and on the end of a cooldown if that was the bound."""
        self.condition("Admitted", ConditionStatus.FALSE, admission.reason, admission.message)
        self.held = True
        self.wake(admission.until)

    def go(self, phase: Phase, reason: str, message: str = "") -> None:
        old = self.status
        if phase is old.phase and reason == old.reason:
            self.status = replace_status(old, message=message or old.message)
            return
        history = [*old.history]
        if phase is not old.phase:
            history.append(
                Transition(time=self.now, from_phase=old.phase, to_phase=phase, reason=reason)
            )
        self.status = replace_status(
            old,
            phase=phase,
            reason=reason,
            message=message,
            phase_since=self.now if phase is not old.phase else old.phase_since,
            history=history[-HISTORY_LIMIT:],
        )
        if phase is not old.phase:
            self.actions.append(
                a.Record(reason=reason, message=f"{old.phase} -> {phase}: {message}".rstrip(": "))
            )

    def set(self, **fields: object) -> None:
        self.status = replace_status(self.status, **fields)

    def condition(self, kind: str, status: ConditionStatus, reason: str, message: str = "") -> None:
        self.conditions[kind] = (status, reason, message)

    @property
    def cordon_observed(self) -> bool:
        """The Node, as this decision sees it (not as it plans it), is cordoned (by
        Pitcrew or by a person: either keeps new pods off) and carries Pitcrew's
        quarantine taint."""
        return self.node.unschedulable and self.node.has_taint(QUARANTINE_TAINT)

    def ensure_cordon(self, taint: str, value: str, reason: str) -> None:
        planned = any(isinstance(x, a.Cordon) and x.taint == taint for x in self.actions)
        if not planned and not (self.node.unschedulable and self.node.has_taint(taint)):
            self.actions.append(
                a.Cordon(
                    taint=taint,
                    value=value,
                    reason=reason,
                    message=f"cordoned and tainted {taint}={value}",
                )
            )

    def finish(self) -> Decision:
        conditions = {c.type: c for c in self.status.conditions}
        phase = self.status.phase
        ready = (
            ConditionStatus.TRUE if phase in IN_SERVICE else ConditionStatus.FALSE,
            self.status.reason or str(phase),
            self.status.message,
        )
        self.conditions["Ready"] = ready
        for kind, (status, reason, message) in self.conditions.items():
            previous = conditions.get(kind)
            changed = previous is None or previous.status is not status
            conditions[kind] = Condition(
                type=kind,
                status=status,
                reason=reason,
                message=message[:32768],
                last_transition_time=self.now
                if changed or previous is None
                else previous.last_transition_time,
                observed_generation=self.generation,
            )
        self.status = replace_status(
            self.status,
            conditions=sorted(conditions.values(), key=lambda c: c.type),
            observed_generation=self.generation,
        )
        return Decision(
            status=self.status,
            actions=tuple(self.actions),
            wake_at=self.wake_at,
            report_due=self.report_due,
            held=self.held,
        )


def replace_status(status: GPUNodeStatus, **fields: object) -> GPUNodeStatus:
    return status.model_copy(update=fields)
