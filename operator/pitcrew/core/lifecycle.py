"""The node lifecycle: one pure function from current state to next state and actions.

``decide`` reads a node (Node facts, its GPUNode status, the policy, a
snapshot of the fleet and the time) and returns the next operator-owned
status and the actions that get the cluster there. It does no I/O and reads
no clock, so it is tested exhaustively without a cluster, and it is
level-triggered: it never asks "what just happened", only "what is true now".
Running it again on the state its own actions produced yields no action
(idempotence), which is what makes a restart or a new leader safe.

Phases::

    Pending -> Validating -> Healthy <-> Suspect
    Healthy/Suspect -> Quarantined -> Draining -> Remediating -> Validating
    Remediating -> Retired (ladder exhausted, or lemon)
    Healthy -> Suspect -> Draining -> Maintenance -> Validating (a maintenance window)
    Healthy <-> Spare;  any -> Excluded (opt-out label)

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
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from gpuhealth.report import CheckStatus, FaultClass
from pitcrew.api.gpunode import (
    HISTORY_LIMIT,
    DrainStatus,
    GPUNodeStatus,
    Phase,
    RemediationStatus,
    RepairUnderTest,
    SlurmNodeStatus,
    Transition,
    VerificationResult,
    VerificationStatus,
    WatchedFinding,
)
from pitcrew.api.meta import Condition, ConditionStatus
from pitcrew.api.policy import DrainTimeoutAction, RemediationAction
from pitcrew.api.vocabulary import (
    IN_SERVICE,
    MAINTENANCE_REASON,
    MANAGED_LABEL,
    QUARANTINE_TAINT,
    RETIRED_TAINT,
    SLURM_REASON_PREFIX,
    SPARE_TAINT,
    STRAGGLER_REASON,
    UNHEALTHY,
    VALIDATING_TAINT,
)
from pitcrew.core import actions as a
from pitcrew.core import safety
from pitcrew.core import verification as verify
from pitcrew.core.agent_config import agent_checks
from pitcrew.core.evidence import (
    WATCH_ESCALATES_AFTER,
    Finding,
    probe_done,
    probe_incomplete,
    repair_evidence,
    worst_finding,
)
from pitcrew.core.names import probe_name, remediation_key, verification_name
from pitcrew.core.views import FleetView, NodeState, PodView, PolicyView

HEARTBEAT_MISSES = 3
WATCHED_CLASSES = (FaultClass.APPLICATION, FaultClass.WATCH)
PROBE_ATTEMPTS = 3
"""Probes one validation may start (after timeouts or reports that are no verdict)
before the node is taken out as not validatable."""


@dataclass(frozen=True)
class Decision:
    status: GPUNodeStatus
    actions: tuple[a.Action, ...] = ()

    @property
    def phase(self) -> Phase:
        return self.status.phase


class _Builder:
    """Accumulates one decision: the next status and the actions."""

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
            self.actions.append(a.Record(reason, f"{old.phase} -> {phase}: {message}".rstrip(": ")))

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
                a.Cordon(taint, value, reason, f"cordoned and tainted {taint}={value}")
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
        return Decision(status=self.status, actions=tuple(self.actions))


def replace_status(status: GPUNodeStatus, **fields: object) -> GPUNodeStatus:
    return status.model_copy(update=fields)


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
    b = _Builder(
        state=state, policy=policy, fleet=fleet, now=now, generation=generation, dry_run=dry_run
    )
    spec = policy.spec
    b.set(policy=policy.name)
    _observe(b)
    if state.node.opted_out:
        b.go(Phase.EXCLUDED, "OptedOut", "node is labelled pitcrew.dev/managed=false")
        return b.finish()
    _publish_checks(b)
    if spec.safety.paused:
        b.condition(
            "Paused",
            ConditionStatus.TRUE,
            "PolicyPaused",
            f"policy {policy.name} is paused: no decisions",
        )
        return b.finish()
    b.condition("Paused", ConditionStatus.FALSE, "PolicyActive")
    handler = _PHASES.get(state.status.phase, _pending)
    handler(b)
    _verification(b)
    _slurm(b)
    return b.finish()


def _verification(b: _Builder) -> None:
    """Periodic verification: judge the one in flight, or start one on an idle node
    in service that is due, within ``maxConcurrent``. A node that left service
    (a passive finding, a ValidationRun) stops its verification at once: a probe must
    not hold the GPUs a reset or a validation needs."""
    verification = b.status.verification
    in_flight = verification is not None and bool(verification.job)
    if b.status.phase not in IN_SERVICE:
        if in_flight:
            _stop_verification(b)
    elif in_flight:
        _judge_verification(b)
    elif b.policy.spec.validation.periodic.enabled:
        _start_verification(b)
    elif verification is not None and verification.next is not None:
        b.set(verification=verification.model_copy(update={"next": None}))


def _stop_verification(b: _Builder) -> None:
    verification = b.status.verification
    assert verification is not None
    b.set(verification=verification.model_copy(update={"job": "", "started_at": None}))
    b.actions.append(
        a.CancelProbe(
            verification.job,
            message=f"verification stopped: the node is {b.status.phase} ({b.status.reason})",
        )
    )


def _start_verification(b: _Builder) -> None:
    periodic = b.policy.spec.validation.periodic
    verification = b.status.verification or VerificationStatus()
    if verification.next is None:
        # Never verified under this policy: due now; maxConcurrent spreads the pool out.
        verification = verification.model_copy(update={"next": b.now})
        b.set(verification=verification)
    node = b.node
    due = verification.next is not None and verification.next <= b.now
    # A node in Slurm's service is verified by Slurm's HealthCheckProgram (gpuhealth
    # slurm): a probe pod would race Slurm, which knows nothing of it, for the GPUs.
    in_slurm = node.slurm is not None and not node.slurm.out
    idle = not (node.busy or in_slurm or node.unschedulable or node.validation_requested)
    # Busy, cordoned by someone, held by a run or not Ready: it stays due until it is not.
    if not due or not idle or not node.ready or b.dry_run or node.gpus == 0:
        return
    if not safety.admit_verification(periodic, b.fleet).allowed:
        return
    name = verification_name(node.name, b.now)
    b.set(verification=verification.model_copy(update={"job": name, "started_at": b.now}))
    b.actions.append(
        a.StartProbe(
            suite=periodic.suite.value,
            name=name,
            reason="VerificationStarted",
            message=f"{periodic.suite} verification of idle node {node.name} "
            "(preemptible, no cordon)",
        )
    )


def _judge_verification(b: _Builder) -> None:
    verification = b.status.verification
    assert verification is not None
    spec = b.policy.spec.validation
    found = verify.outcome(b.status, node=b.node, now=b.now, timeout=spec.timeout)
    if found is None:
        return
    b.set(
        verification=VerificationStatus(
            last_time=b.now,
            last_result=found.result,
            message=found.message[:1024],
            next=b.now + _next_verification(spec.periodic.interval, verification, found.result),
        )
    )
    if found.cancel:
        b.actions.append(a.CancelProbe(verification.job, message=found.message))
    b.actions.append(
        a.Record(
            f"Verification{found.result}",
            f"verification {verification.job}: {found.message}",
            warning=found.result in (VerificationResult.FAILED, VerificationResult.INCONCLUSIVE),
        )
    )
    if found.finding is not None:
        finding = found.finding
        _take_out(
            b,
            Finding(
                finding.fault_class,
                finding.reason,
                f"periodic verification failed: {finding.message}",
                finding.gpus,
            ),
            admitted_already=False,
            quarantine=True,
        )


INCONCLUSIVE_RETRY = datetime.timedelta(minutes=1)
"""How soon a verification that gave no verdict is tried again, once."""


def _next_verification(
    interval: datetime.timedelta, last: VerificationStatus, result: VerificationResult
) -> datetime.timedelta:
    """The interval, except after a first verification without a verdict (a transient
    NVML error, a probe that crashed): no evidence either way, so it is tried again
    soon, once; a second in a row waits the full interval."""
    again = result is VerificationResult.INCONCLUSIVE
    if again and last.last_result is not VerificationResult.INCONCLUSIVE:
        return min(interval, INCONCLUSIVE_RETRY)
    return interval


def _publish_checks(b: _Builder) -> None:
    """Publish the policy's checks to the agent when they differ from what it runs."""
    desired = agent_checks(b.policy, b.state.node)
    if b.state.checks != desired:
        message = f"checks of policy {b.policy.name}: every {desired.interval}"
        if b.state.checks is not None:
            message += f" (was policy {b.state.checks.policy}, every {b.state.checks.interval})"
        b.actions.append(a.PublishChecks(desired, message=message))


def _watch(b: _Builder) -> None:
    """Keep, for each application or watch finding of the latest report, the time it
    was first seen, and mark the ones that outlived ``WATCH_ESCALATES_AFTER``."""
    seen = {(w.check, w.gpu): w.since for w in b.status.watching}
    watching = []
    for c in b.status.checks.results:
        if c.status is not CheckStatus.FAIL or c.fault_class not in WATCHED_CLASSES:
            continue
        since = seen.get((c.name, c.gpu), b.now)
        watching.append(
            WatchedFinding(
                check=c.name,
                gpu=c.gpu,
                since=since,
                escalated=b.now - since >= WATCH_ESCALATES_AFTER,
            )
        )
    if watching != b.status.watching:
        b.set(watching=watching[:64])


def _observe(b: _Builder) -> None:
    """Conditions about the evidence itself: agent heartbeat, checks that could not run."""
    _watch(b)
    status, spec = b.status, b.policy.spec
    if _could_not_check(status):
        errors = [c for c in status.checks.results if c.status is CheckStatus.ERROR]
        b.condition(
            "ChecksRunnable",
            ConditionStatus.FALSE,
            "ChecksCouldNotRun",
            "; ".join(f"{c.name}: {c.message}" for c in errors)[:1000],
        )
    else:
        b.condition("ChecksRunnable", ConditionStatus.TRUE, "ChecksRan")
    unread = [c for c in status.checks.results if c.name == KERNEL_LOG_CHECK]
    if unread:
        # The events of the lines it could read are judged as usual; an Xid in a line
        # it could not read may be unseen, which an SRE must know.
        b.condition(
            "KernelLogRead",
            ConditionStatus.FALSE,
            "LinesUnreadable",
            "; ".join(c.message for c in unread)[:1000],
        )
    else:
        b.condition("KernelLogRead", ConditionStatus.TRUE, "Read")
    limit = spec.checks.heartbeat * HEARTBEAT_MISSES
    if status.last_heartbeat is None:
        b.condition("AgentReporting", ConditionStatus.UNKNOWN, "NoReportYet")
    elif b.now - status.last_heartbeat > limit:
        b.condition(
            "AgentReporting",
            ConditionStatus.FALSE,
            "HeartbeatMissing",
            f"no agent report since {status.last_heartbeat.isoformat()}",
        )
    else:
        b.condition("AgentReporting", ConditionStatus.TRUE, "Reporting")


def _take_out(
    b: _Builder, finding: Finding, *, admitted_already: bool, quarantine: bool = False
) -> bool:
    """Move a node in service to Suspect (degraded) or Quarantined (fatal, or with
    ``quarantine``: evidence from a probe, which no later passive report repeats, on an
    idle node that has no checkpoint to wait for)."""
    spec = b.policy.spec
    if not admitted_already:
        admission = safety.admit_unhealthy(
            spec.safety, b.fleet, now=b.now, cooldown_until=b.policy.cooldown_until
        )
        if not admission.allowed:
            already_refused = any(
                c.type == "Admitted" and c.reason == admission.reason for c in b.status.conditions
            )
            b.condition("Admitted", ConditionStatus.FALSE, admission.reason, admission.message)
            if not already_refused:
                b.actions.append(
                    a.Record(
                        admission.reason,
                        f"not taking {b.node.name} out: {admission.message} "
                        f"({finding.reason}: {finding.message})",
                        warning=True,
                    )
                )
            if b.status.phase in IN_SERVICE:
                # Kept in service means in service: no leftover Pitcrew cordon.
                _lift_cordon(b, admission.reason, "kept in service: Pitcrew's cordon lifted")
            return False
    b.condition("Admitted", ConditionStatus.TRUE, "Admitted")
    if b.status.phase in IN_SERVICE and b.fleet.spares and b.node.name not in b.fleet.spares:
        spare = b.fleet.spares[0]
        b.actions.append(
            a.ReleaseSpare(spare, message=f"replacing {b.node.name} ({finding.reason})")
        )
    if finding.fault_class is FaultClass.FATAL or quarantine:
        b.go(Phase.QUARANTINED, finding.reason, finding.message)
        b.ensure_cordon(QUARANTINE_TAINT, finding.reason, finding.reason)
        _quarantined(b)
    else:
        b.go(Phase.SUSPECT, finding.reason, finding.message)
        _suspect(b)
    return True


def _pending(b: _Builder) -> None:
    status, spec = b.status, b.policy.spec
    if status.checks.report_time is None:
        b.go(Phase.PENDING, "WaitingForAgent", "no health report from the node agent yet")
        return
    finding = worst_finding(status)
    joined_later = b.node.created > b.policy.created
    if joined_later and spec.validation.burn_in_on_join:
        _start_validation(b, "BurnInOnJoin", "new node: burn-in before it takes work")
    elif finding is not None:
        b.go(Phase.HEALTHY, "Adopted", "in service before the policy")
        _take_out(b, finding, admitted_already=False)
    else:
        reason = "JoinedHealthy" if joined_later else "Adopted"
        b.go(Phase.HEALTHY, reason, "passive checks passed")


def _start_validation(b: _Builder, reason: str, message: str) -> None:
    b.go(Phase.VALIDATING, reason, message)
    b.set(drain=None, remediation=None)
    b.ensure_cordon(VALIDATING_TAINT, reason, reason)
    _start_probe(b, attempt=1)


def _start_probe(b: _Builder, *, attempt: int) -> None:
    # A ValidationRun's own suite wins over the policy's (a run may ask for burn-in).
    suite = b.node.validation_suite or b.policy.spec.validation.suite.value
    name = probe_name(b.node.name, b.now, attempt)
    b.set(probe_job=name, probe_attempts=attempt)
    b.actions.append(
        a.StartProbe(
            suite=suite,
            name=name,
            message=f"{suite} validation of {b.node.name} (attempt {attempt}/{PROBE_ATTEMPTS})",
        )
    )


def _retry_probe(b: _Builder, reason: str, why: str) -> None:
    """Start the next probe of this validation, or, when they are used up, take the
    node out: a node that cannot be validated must not go into service untested."""
    attempts = b.status.probe_attempts
    if attempts >= PROBE_ATTEMPTS:
        b.go(
            Phase.QUARANTINED,
            "ValidationNotPossible",
            f"{why} ({attempts} probes, none a verdict)",
        )
        b.ensure_cordon(QUARANTINE_TAINT, "ValidationNotPossible", "ValidationNotPossible")
        _quarantined(b)
        return
    b.actions.append(
        a.Record(reason, f"{why}; starting probe {attempts + 1} of {PROBE_ATTEMPTS}", warning=True)
    )
    b.set(phase_since=b.now)
    _start_probe(b, attempt=attempts + 1)


def _evict_late_arrivals(b: _Builder) -> None:
    """Pods bound to a node under validation: the scheduler placed them while the node
    was still in service and the bind landed after the cordon (a slow or throttled
    bind takes seconds). The node runs nothing until it is validated, and they hold
    the GPUs its probe needs, so they are evicted like a drain's, once the cordon is
    seen (evicted before, they could come straight back)."""
    late = b.node.workload
    if late and b.node.unschedulable:
        names = ", ".join(p.key for p in late[:5])
        b.actions.append(
            a.Evict(
                late,
                reason="LateArrivalEvicted",
                message=f"bound after the cordon, evicted from a node under validation: {names}",
            )
        )


def _awaiting_probe(b: _Builder) -> None:
    """No report yet from this validation's probe. Its pod failing is an attempt spent
    at once; the timeout spends one only if the pod ran. A probe whose pod never
    reached the node (a starved Job controller or scheduler, a deleted Job) proved
    nothing about the node: it is started again under the same attempt number, so a
    slow control plane costs time, never the node's place in service."""
    status, timeout = b.status, b.policy.spec.validation.timeout
    pods = [p for p in b.node.pods if p.job_name == status.probe_job]
    failed = next((p for p in pods if p.finished and not p.succeeded), None)
    if failed is not None:
        _retry_probe(b, "ProbeFailed", f"probe pod {failed.name} failed without a report")
        return
    if status.phase_since is None or b.now - status.phase_since <= timeout:
        return
    if pods:
        _retry_probe(b, "ValidationTimedOut", f"no probe result within {timeout}")
        return
    if status.probe_job:
        b.actions.append(
            a.CancelProbe(
                status.probe_job,
                reason="ProbeNotStarted",
                message=f"its pod never reached the node within {timeout}; "
                f"not counted, attempt {status.probe_attempts} starts again",
            )
        )
    b.set(phase_since=b.now)
    _start_probe(b, attempt=status.probe_attempts)


def _spares_wanted(b: _Builder) -> int:
    """Spares to hold now: the policy's count, less the nodes out for faults. A spare
    released to replace a broken node stays in service; the repaired node (or an
    idle one) becomes the spare again once the fleet is whole."""
    return max(0, b.policy.spec.spares.count - b.fleet.count(*UNHEALTHY))


def _lift_cordon(b: _Builder, reason: str, message: str, *, spare_too: bool = False) -> None:
    """Undo Pitcrew's cordon and out-of-service taints (never someone else's cordon);
    the spare taint too when the node goes into service."""
    taints: tuple[str, ...] = (QUARANTINE_TAINT, VALIDATING_TAINT, RETIRED_TAINT)
    if spare_too:
        taints = (*taints, SPARE_TAINT)
    node = b.node
    if (
        node.cordoned_by_pitcrew
        or node.stale_cordon_claim
        or any(node.has_taint(t) for t in taints)
    ):
        b.actions.append(a.Uncordon(reason, message))


def _back_in_service(b: _Builder, reason: str, message: str) -> None:
    spare_needed = len(b.fleet.spares) < _spares_wanted(b)
    if spare_needed:
        b.go(Phase.SPARE, reason, f"{message}; held back as a hot spare")
        # Uncordon drops every Pitcrew taint, so the spare taint goes on after it.
        _lift_cordon(b, reason, "validated: cordon lifted, spare taint kept")
        b.actions.append(a.SetTaint(SPARE_TAINT, "true", "HeldAsSpare", "tainted as a hot spare"))
        return
    b.go(Phase.HEALTHY, reason, message)
    _lift_cordon(b, reason, f"back in service: {message}", spare_too=True)


def _validating(b: _Builder) -> None:
    status, spec = b.status, b.policy.spec
    _evict_late_arrivals(b)
    if not probe_done(status):
        _awaiting_probe(b)
        if b.status.phase is Phase.VALIDATING:
            b.ensure_cordon(VALIDATING_TAINT, status.reason or "Validating", "Validating")
        return
    assert status.probe is not None  # _probe_done
    finding = worst_finding(status, probe=True)
    incomplete = "" if finding else probe_incomplete(status.probe, gpus=b.node.gpus)
    if incomplete:
        _retry_probe(b, "ProbeIncomplete", incomplete)
        if b.status.phase is Phase.VALIDATING:
            b.ensure_cordon(VALIDATING_TAINT, status.reason or "Validating", "Validating")
        return
    if finding is None and b.node.validation_requested:
        b.go(Phase.VALIDATING, "ValidationRunHold", "passed; held for the run's pair tests")
        return
    if finding is None:
        suite = status.probe.suite if status.probe else "probe"
        if spec.validation.periodic.enabled:
            # A validation is a verification and more: the next one is due an interval on.
            b.set(
                verification=VerificationStatus(
                    last_time=b.now,
                    last_result=VerificationResult.PASSED,
                    message=f"{suite} validation passed",
                    next=b.now + spec.validation.periodic.interval,
                )
            )
        _back_in_service(b, "ValidationPassed", f"{suite} validation passed")
        b.set(repair_under_test=None)
        return
    admission = safety.admit_unhealthy(
        spec.safety, b.fleet, now=b.now, cooldown_until=b.policy.cooldown_until
    )
    if not admission.allowed:
        # Out of service already (cordoned, Validating), but the breaker's count
        # must hold for this path too: it stays Validating until a slot is free.
        b.condition("Admitted", ConditionStatus.FALSE, admission.reason, admission.message)
        b.ensure_cordon(VALIDATING_TAINT, status.reason or "Validating", "Validating")
        return
    b.go(Phase.QUARANTINED, finding.reason, f"validation failed: {finding.message}")
    b.ensure_cordon(QUARANTINE_TAINT, finding.reason, finding.reason)
    _quarantined(b)


def _finding(b: _Builder) -> Finding | None:
    """What takes a node in service out: its worst failing check, or else its job's
    verdict that it is the straggler (a degraded fault no check of its own sees)."""
    finding = worst_finding(b.status)
    if finding is None and b.state.straggler:
        return Finding(FaultClass.DEGRADED, STRAGGLER_REASON, b.state.straggler, ())
    return finding


def _healthy(b: _Builder) -> None:
    finding = _finding(b)
    if finding is None and _maintenance_due(b):
        finding = _maintenance_finding(b)
    if finding is not None:
        _take_out(b, finding, admitted_already=False)
        return
    b.condition("Admitted", ConditionStatus.TRUE, "Admitted")
    if b.node.validation_requested:
        _requested_validation(b)
        return
    # Level-triggered: a node in service carries no Pitcrew cordon, whatever
    # left one behind (a request withdrawn while the node was busy, a lost write).
    _lift_cordon(b, "InService", "node is healthy: Pitcrew's cordon lifted")
    spares = _spares_wanted(b)
    if (
        b.status.phase is Phase.HEALTHY
        and len(b.fleet.spares) < spares
        and not b.node.busy
        and not b.node.unschedulable
    ):
        b.go(Phase.SPARE, "HeldAsSpare", "idle validated node held back as a hot spare")
        b.actions.append(a.SetTaint(SPARE_TAINT, "true", "HeldAsSpare", "tainted as a hot spare"))
    elif b.status.phase is Phase.HEALTHY and b.node.has_taint(SPARE_TAINT):
        # A spare taint on a Healthy node (its Spare status write was lost): it
        # would keep work off a node the fleet counts as taking work.
        b.actions.append(
            a.RemoveTaint(SPARE_TAINT, "InService", "a Healthy node carries no spare taint")
        )


def _requested_validation(b: _Builder) -> None:
    """A ValidationRun asks for this node: stop new work, validate once idle."""
    if b.node.busy:
        b.ensure_cordon(VALIDATING_TAINT, "ValidationRun", "ValidationRun")
        b.condition(
            "ValidationPending",
            ConditionStatus.TRUE,
            "WaitingForIdle",
            f"{b.node.work} still running",
        )
        return
    b.condition("ValidationPending", ConditionStatus.FALSE, "Started")
    _start_validation(b, "ValidationRun", "requested by a ValidationRun")


def _spare(b: _Builder) -> None:
    if _finding(b) is not None or b.node.validation_requested or _maintenance_due(b):
        _healthy(b)
        return
    if not b.node.has_taint(SPARE_TAINT):
        b.go(Phase.HEALTHY, "SpareReleased", "spare taint removed: node takes work")
    elif len(b.fleet.spares) > _spares_wanted(b):
        b.go(Phase.HEALTHY, "SpareSurplus", "more spares than the policy asks for")
        b.actions.append(a.RemoveTaint(SPARE_TAINT, "SpareSurplus", "spare taint removed"))


def _checkpointed(b: _Builder) -> bool:
    """Every training pod on the node checkpointed since the node became Suspect.
    Only training pods (``pitcrew.dev/job``) checkpoint: waiting on a web server or
    a log shipper would hold the drain to ``checkpointMaxDelay`` for nothing."""
    since = b.status.phase_since
    training = [p.checkpoint_at for p in b.node.workload if p.job]
    slurm = b.node.slurm
    if slurm is not None and slurm.busy:
        if slurm.jobs is None:
            return False  # its jobs not read yet: no evidence they checkpointed
        training += [j.checkpoint_at for j in slurm.jobs]
    return all(at is not None and since is not None and at > since for at in training)


KERNEL_LOG_CHECK = "kernel-log"
"""The result the xid check adds when kernel-log lines could not be parsed."""


def _could_not_check(status: GPUNodeStatus) -> bool:
    return any(c.status is CheckStatus.ERROR for c in status.checks.results)


def _suspect(b: _Builder) -> None:
    status, spec = b.status, b.policy.spec
    finding = worst_finding(status)
    # A straggler's verdict came from its job, which a drain will move: no later
    # report clears it, a validation does (after the drain at the next checkpoint).
    # A maintenance window holds the node until it is withdrawn.
    straggling = finding is None and status.reason == STRAGGLER_REASON
    straggling = straggling or (status.reason == MAINTENANCE_REASON and _maintenance_due(b))
    if finding is None and not straggling and not _could_not_check(status):
        _back_in_service(b, "FaultCleared", "the degraded condition cleared")
        return
    # A check that could not run is no evidence the fault cleared: still Suspect.
    if finding is not None and finding.fault_class is FaultClass.FATAL:
        b.go(Phase.QUARANTINED, finding.reason, finding.message)
        b.ensure_cordon(QUARANTINE_TAINT, finding.reason, finding.reason)
        _quarantined(b)
        return
    b.ensure_cordon(QUARANTINE_TAINT, status.reason, status.reason)
    waited = b.now - (status.phase_since or b.now)
    max_delay = spec.safety.drain.checkpoint_max_delay
    if _checkpointed(b) or waited >= max_delay:
        _begin_drain(b, "Checkpointed" if _checkpointed(b) else "CheckpointWaitExpired")


def _begin_drain(b: _Builder, why: str) -> None:
    if not b.cordon_observed:
        return  # the cordon is planned, not seen: evicting now would let pods come back
    admission = safety.admit_drain(b.policy.spec.safety, b.fleet)
    if not admission.allowed:
        b.condition("Admitted", ConditionStatus.FALSE, admission.reason, admission.message)
        return
    b.condition("Admitted", ConditionStatus.TRUE, "Admitted")
    b.go(Phase.DRAINING, b.status.reason, f"{why}: {b.status.message}".strip(": "))
    b.set(drain=DrainStatus(started_at=b.now, pending=[p.key for p in b.node.workload]))
    _draining(b)


def _quarantined(b: _Builder) -> None:
    b.ensure_cordon(QUARANTINE_TAINT, b.status.reason, b.status.reason)
    if b.status.phase is Phase.QUARANTINED:
        _begin_drain(b, "Quarantined")


def _draining(b: _Builder) -> None:
    spec = b.policy.spec
    drain = b.status.drain or DrainStatus(started_at=b.now)
    b.ensure_cordon(QUARANTINE_TAINT, b.status.reason, b.status.reason)
    if not b.cordon_observed:
        return  # someone lifted the cordon: evict only once it is back
    workload = b.node.workload
    terminating = [p for p in b.node.pods if p.terminating and not p.probe]
    slurm = _slurm_pending(b)
    pending = [p.key for p in workload + tuple(terminating)] + slurm
    b.set(drain=drain.model_copy(update={"pending": pending[:1024]}))
    if not pending:
        _begin_remediation(b)
        return
    timeout = spec.safety.drain.timeout
    on_timeout = spec.safety.drain.on_timeout
    timed_out = b.now - drain.started_at > timeout and on_timeout is not DrainTimeoutAction.WAIT
    if not workload:
        # Evicted pods shutting down, or Slurm's jobs running on. One stuck Terminating
        # (a finalizer, a hung kubelet) or a job that never ends must not hold the
        # drain slot forever: the timeout applies to them.
        if timed_out and terminating:
            _drain_timed_out_on_terminating(b, terminating)
        elif timed_out:
            _slurm_drain_timed_out(b)
        return
    if not timed_out:
        b.actions.append(a.Evict(workload, message=f"evicting {len(workload)} pods"))
    elif spec.safety.drain.on_timeout is DrainTimeoutAction.FORCE:
        b.actions.append(
            a.ForceDelete(
                workload,
                message=f"drain timed out after "
                f"{spec.safety.drain.timeout}: deleting "
                f"{len(workload)} pods",
            )
        )
    else:
        _remediate_anyway(b, "DrainTimeoutEscalate", f"{len(workload)} pods left")


def _slurm_pending(b: _Builder) -> list[str]:
    """What a drain still waits for in Slurm: its drain to be seen, then its jobs."""
    slurm = b.node.slurm
    if slurm is None:
        return []
    if not slurm.out:
        return [f"slurm/{slurm.name} (drain not seen yet)"]
    if not slurm.busy:
        return []
    if not slurm.jobs:
        return [f"slurm/{slurm.name} (jobs running)"]
    return [f"slurm/job/{j.id}" for j in slurm.jobs]


def _slurm_drain_timed_out(b: _Builder) -> None:
    """Slurm jobs outlived the drain timeout: Force downs the Slurm node (Slurm kills
    or requeues them, as it would for a failed node); Escalate remediates anyway."""
    spec = b.policy.spec.safety.drain
    slurm = b.node.slurm
    assert slurm is not None  # only Slurm can be pending once pods are gone
    if spec.on_timeout is DrainTimeoutAction.FORCE:
        if "DOWN" not in slurm.states:
            b.actions.append(
                a.SetSlurmState(
                    slurm.name,
                    "DOWN",
                    _slurm_reason(b),
                    reason="DrainTimeoutForce",
                    message=f"drain timed out after {spec.timeout}: Slurm node "
                    f"{slurm.name} set DOWN, its jobs ended by Slurm",
                )
            )
        return
    _remediate_anyway(b, "DrainTimeoutEscalate", f"Slurm jobs running on {slurm.name}")


def _slurm_reason(b: _Builder) -> str:
    return f"{SLURM_REASON_PREFIX}{b.status.reason or b.status.phase}"[:256]


def _slurm(b: _Builder) -> None:
    """Slurm's view of the node in its status, and Slurm kept in step with Pitcrew's:
    a node out of service is drained in Slurm (by Pitcrew's hand, reason ``pitcrew:
    <reason>``), a node back in service is resumed, only if Pitcrew drained it. A
    drain or DOWN made by a person or by Slurm is shown and never undone."""
    slurm = b.node.slurm
    if slurm is None:
        b.set(slurm=None)
        return
    owner = "pitcrew" if slurm.pitcrews else "other" if slurm.out else ""
    b.set(
        slurm=SlurmNodeStatus(
            node=slurm.name, state="+".join(slurm.states), reason=slurm.reason, drained_by=owner
        )
    )
    phase = b.status.phase
    if phase is Phase.HEALTHY and slurm.pitcrews:
        b.actions.append(
            a.SetSlurmState(
                slurm.name,
                "RESUME",
                reason="SlurmResumed",
                message=f"Slurm node {slurm.name} resumed: {b.status.reason}",
            )
        )
    elif phase not in SLURM_IN and (not slurm.out or (slurm.pitcrews and not slurm.drained)):
        # Pitcrew's own DOWN gets a drain on top: with ReturnToService, a DOWN node
        # takes jobs again as soon as its slurmd registers, before any validation.
        b.actions.append(
            a.SetSlurmState(
                slurm.name,
                "DRAIN",
                _slurm_reason(b),
                reason="SlurmDrained",
                message=f"Slurm node {slurm.name} drained: no new jobs start there",
            )
        )


SLURM_IN = frozenset({Phase.HEALTHY, Phase.PENDING, Phase.EXCLUDED})
"""Phases in which Pitcrew keeps no Slurm drain: in service, not judged yet, opted out."""


def _drain_timed_out_on_terminating(b: _Builder, terminating: list[PodView]) -> None:
    spec = b.policy.spec.safety.drain
    names = ", ".join(p.key for p in terminating)[:500]
    if spec.on_timeout is DrainTimeoutAction.FORCE:
        b.actions.append(
            a.ForceDelete(
                tuple(terminating),
                message=f"drain timed out after {spec.timeout} on terminating pods",
            )
        )
    stuck = f"{len(terminating)} pods stuck terminating ({names})"
    _remediate_anyway(b, "DrainTimeoutTerminating", stuck)


def _remediate_anyway(b: _Builder, reason: str, left: str) -> None:
    """The drain's timeout passed with ``left`` still on the node: the rung starts, and
    what is left dies with the repair."""
    timeout = b.policy.spec.safety.drain.timeout
    b.actions.append(
        a.Record(reason, f"drain timed out after {timeout} with {left}: remediating anyway", True)
    )
    _begin_remediation(b, escalated=True)


def _fault_class(b: _Builder) -> FaultClass:
    if b.status.remediation is not None:
        return b.status.remediation.fault_class
    finding = worst_finding(b.status)
    if finding is not None:
        return finding.fault_class
    return (
        FaultClass.FATAL
        if b.status.reason and b.status.phase is Phase.QUARANTINED
        else (FaultClass.DEGRADED)
    )


def _lemon(b: _Builder) -> bool:
    lemon = b.policy.spec.remediation.lemon
    window = lemon.window
    recent = [t for t in b.status.remediations if b.now - t < window]
    return len(recent) >= lemon.max_remediations


def _retire(b: _Builder, reason: str, message: str) -> None:
    b.go(Phase.RETIRED, reason, message)
    b.set(remediation=None, drain=None, repair_under_test=None)
    b.actions.append(a.SetTaint(RETIRED_TAINT, reason, reason, f"retired: {message}"))


def _begin_remediation(b: _Builder, *, escalated: bool = False) -> None:
    """Start the ladder: only on a node seen cordoned and empty (or past the drain's
    explicit escalation), never in a dry run."""
    slurm_busy = b.node.slurm is not None and (b.node.slurm.busy or not b.node.slurm.out)
    if not b.cordon_observed or ((b.node.workload or slurm_busy) and not escalated):
        return
    if b.status.reason == MAINTENANCE_REASON and worst_finding(b.status) is None:
        maintenance = b.node.maintenance
        what = f"{maintenance.name} ({maintenance.reason})" if maintenance else "maintenance"
        b.go(Phase.MAINTENANCE, MAINTENANCE_REASON, f"drained for {what}".replace(" ()", ""))
        b.set(drain=None)
        return
    if b.dry_run:
        b.condition(
            "Remediation", ConditionStatus.FALSE, "DryRun", "dry run: no remediation is started"
        )
        return
    if b.status.phase is not Phase.REMEDIATING:
        admission = safety.admit_remediation(b.policy.spec.safety, b.fleet)
        if not admission.allowed:
            b.condition("Admitted", ConditionStatus.FALSE, admission.reason, admission.message)
            return
    fault_class = _fault_class(b)
    if _lemon(b):
        _retire(
            b,
            "Lemon",
            f"remediated {len(b.status.remediations)} times within "
            f"{b.policy.spec.remediation.lemon.window}",
        )
        return
    held = b.status.repair_under_test
    # A repair its validation found wanting did not hold: the next rung, not the first.
    step = held.step + 1 if held is not None and held.fault_class is fault_class else 0
    b.set(repair_under_test=None)
    _start_step(b, fault_class, step=step, attempt=1)


def _start_step(b: _Builder, fault_class: FaultClass, *, step: int, attempt: int) -> None:
    ladder = b.policy.spec.remediation.ladders.for_class(fault_class)
    if step >= len(ladder):
        _retire(b, "LadderExhausted", f"every remediation for {fault_class} faults failed")
        return
    rung = ladder[step]
    if rung.action is RemediationAction.RETIRE:
        _retire(b, "LadderRetire", f"the {fault_class} ladder ends in retire")
        return
    key = remediation_key(b.node.name, step, attempt, b.now)
    finding = worst_finding(b.status)
    gpus = finding.gpus if finding else ()
    b.go(
        Phase.REMEDIATING,
        f"Remediation{''.join(p.capitalize() for p in rung.action.split('-'))}",
        f"{rung.action} (step {step + 1}, attempt {attempt}/{rung.attempts})",
    )
    b.set(
        remediation=RemediationStatus(
            action=rung.action,
            fault_class=fault_class,
            step=step,
            attempt=attempt,
            started_at=b.now,
            reference=key,
            boot_id=b.node.boot_id,
        ),
        remediations=[*b.status.remediations, b.now][-100:],
        drain=None,
    )
    b.actions.append(
        a.Remediate(
            action=rung.action,
            step=step,
            attempt=attempt,
            key=key,
            gpus=gpus,
            message=f"{rung.action} attempt {attempt}",
        )
    )


def _resume(b: _Builder, remediation: RemediationStatus) -> None:
    """A rung another process recorded and this one has not started: start it again
    if that is safe (idempotent for its key: an existing Job is found, a webhook
    receiver drops the repeat), so a start the API never saw is not left to time
    out. A reboot is not repeated; its evidence (a new boot ID) or its timeout
    decides, as the module says."""
    if b.state.rung_started or remediation.confirmed or remediation.error:
        return
    if not remediation.action.idempotent or b.dry_run:
        return
    finding = worst_finding(b.status)
    b.actions.append(
        a.Remediate(
            action=remediation.action,
            step=remediation.step,
            attempt=remediation.attempt,
            key=remediation.reference,
            gpus=finding.gpus if finding else (),
            reason="RemediationResumed",
            message=f"{remediation.action} attempt {remediation.attempt}, resumed by this leader",
        )
    )


def _remediating(b: _Builder) -> None:
    remediation = b.status.remediation
    b.ensure_cordon(QUARANTINE_TAINT, b.status.reason or "Remediating", "Remediating")
    if remediation is None:
        _begin_remediation(b)
        return
    evidence = repair_evidence(b.node, remediation)
    if evidence and not remediation.confirmed:
        remediation = remediation.model_copy(update={"confirmed": evidence})
        b.set(remediation=remediation)
        b.actions.append(
            a.ConfirmRepair(
                action=remediation.action,
                key=remediation.reference,
                message=f"{remediation.action} {remediation.reference}: {evidence}",
            )
        )
    _resume(b, remediation)
    reported = bool(remediation.confirmed) and b.status.checks.repair == remediation.reference
    if reported and worst_finding(b.status) is None:
        if b.policy.spec.validation.burn_in_after_repair:
            _start_validation(
                b,
                "Repaired",
                f"{remediation.action} repaired the node: revalidating before it takes work",
            )
            b.set(
                repair_under_test=RepairUnderTest(
                    action=remediation.action,
                    fault_class=remediation.fault_class,
                    step=remediation.step,
                )
            )
        else:
            _back_in_service(b, "Repaired", f"{remediation.action} repaired the node")
            b.set(remediation=None)
        return
    ladder = b.policy.spec.remediation.ladders.for_class(remediation.fault_class)
    rung = ladder[remediation.step] if remediation.step < len(ladder) else None
    timeout = rung.timeout if rung else datetime.timedelta(0)
    if not remediation.error and b.now - remediation.started_at <= timeout:
        return
    if b.dry_run:
        b.condition(
            "Remediation", ConditionStatus.FALSE, "DryRun", "dry run: the ladder does not advance"
        )
        return
    if remediation.error:
        why = f"could not start: {remediation.error}"
    else:
        why = f"did not repair the node within {rung.timeout if rung else '0s'}"
    b.actions.append(
        a.Record(
            "RemediationFailed" if remediation.error else "RemediationTimedOut",
            f"{remediation.action} attempt {remediation.attempt} {why}",
            warning=True,
        )
    )
    if _lemon(b):
        _retire(
            b,
            "Lemon",
            f"remediated {len(b.status.remediations)} times within "
            f"{b.policy.spec.remediation.lemon.window}",
        )
    elif rung is not None and remediation.attempt < rung.attempts:
        _start_step(
            b, remediation.fault_class, step=remediation.step, attempt=remediation.attempt + 1
        )
    else:
        _start_step(b, remediation.fault_class, step=remediation.step + 1, attempt=1)


def _retired(b: _Builder) -> None:
    b.ensure_cordon(RETIRED_TAINT, b.status.reason or "Retired", "Retired")


def _excluded(b: _Builder) -> None:
    b.go(Phase.PENDING, "OptedIn", f"{MANAGED_LABEL} label no longer false")
    _pending(b)


def _maintenance_due(b: _Builder) -> bool:
    """A window covers the node and starts within ``checkpointMaxDelay``: time for its
    jobs' next checkpoint before the work begins."""
    window = b.node.maintenance
    lead = b.policy.spec.safety.drain.checkpoint_max_delay
    return window is not None and not window.over(b.now) and b.now >= window.start - lead


def _maintenance_finding(b: _Builder) -> Finding:
    window = b.node.maintenance
    assert window is not None  # _maintenance_due
    why = f"{window.name} from {window.start:%Y-%m-%dT%H:%M:%SZ}"
    return Finding(
        FaultClass.DEGRADED, MAINTENANCE_REASON, f"{why}: {window.reason}".rstrip(": "), ()
    )


def _maintenance(b: _Builder) -> None:
    """Drained for a window: kept out (findings while people work on it are not
    acted on) until the window ends or is withdrawn, then revalidated."""
    b.ensure_cordon(QUARANTINE_TAINT, MAINTENANCE_REASON, MAINTENANCE_REASON)
    window = b.node.maintenance
    if window is None or window.over(b.now):
        _start_validation(
            b, "MaintenanceEnded", "the maintenance window ended: revalidating before it takes work"
        )


_PHASES = {
    Phase.PENDING: _pending,
    Phase.VALIDATING: _validating,
    Phase.HEALTHY: _healthy,
    Phase.SPARE: _spare,
    Phase.SUSPECT: _suspect,
    Phase.QUARANTINED: _quarantined,
    Phase.DRAINING: _draining,
    Phase.REMEDIATING: _remediating,
    Phase.MAINTENANCE: _maintenance,
    Phase.RETIRED: _retired,
    Phase.EXCLUDED: _excluded,
}
