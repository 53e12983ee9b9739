"""Remediating and Retired: the ladder, climbed one rung per failed attempt.

A rung starts only on a node seen cordoned and empty (or past the drain's
explicit escalation), never in a dry run, within ``maxConcurrentRemediations``.
Its progress (action, step, attempt, start, key) is status, so a new leader
resumes it; a rung is over when the evidence of its repair is seen (a reset
Job that succeeded, a new boot ID) and the agent reported after it, or when its
timeout passes, which is the decision's wake-up meanwhile. A node remediated
too often within the lemon window is retired instead of repaired again.

A reset-gpu rung first asks the node's agent to let go of the GPUs: ``nvidia-smi -r``
is refused ("in use by another client") while any process holds a device open, and
the agent's NVML handles do. The rung is recorded ``awaitingRelease``; the agent sees
it on its GPUNode, closes NVML, pauses its checks and says so in
``status.checks.released``; only then is the reset Job created. An agent that does not
answer within :data:`RELEASE_WAIT` (not running, so holding nothing) does not hold the
reset longer: the Job is created anyway, and the Event says the agent did not answer.
"""

from __future__ import annotations

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import Phase, RemediationStatus, RepairUnderTest
from pitcrew.api.meta import ConditionStatus, Duration
from pitcrew.api.policy import RemediationAction
from pitcrew.api.vocabulary import MAINTENANCE_REASON, QUARANTINE_TAINT, RETIRED_TAINT
from pitcrew.core import actions as a
from pitcrew.core import safety
from pitcrew.core.evidence import repair_evidence, worst_finding
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.lifecycle.facts import elapsed, fault_class, lemon, maintenance_active
from pitcrew.core.lifecycle.probes import start_validation
from pitcrew.core.lifecycle.service import back_in_service
from pitcrew.core.names import remediation_key

RELEASE_WAIT = Duration("1m")
"""How long a reset waits for the agent to close its NVML handles. A running agent
answers within a watch event and one status write (seconds); one that has not answered
in a minute is most likely not running, and a process that is not running holds no
device open."""


def retire(b: Builder, reason: str, message: str) -> None:
    b.go(Phase.RETIRED, reason, message)
    b.set(remediation=None, drain=None, repair_under_test=None)
    b.actions.append(
        a.SetTaint(taint=RETIRED_TAINT, value=reason, reason=reason, message=f"retired: {message}")
    )


def retire_lemon(b: Builder) -> None:
    retire(
        b,
        "Lemon",
        f"remediated {len(b.status.remediations)} times within "
        f"{b.policy.spec.remediation.lemon.window}",
    )


def hold_for_maintenance(b: Builder, why: str) -> None:
    """Maintenance: drained for a window, or a window began while the node was out for a
    fault. People work on the node, so the ladder stops where it is (no rung starts, none
    is retried or escalated: a BMC reboot mid-firmware-update is the last thing they
    want); the node is revalidated when the window ends, and a fault still there climbs
    the ladder again from its first rung."""
    maintenance = b.node.maintenance
    what = f"{maintenance.name} ({maintenance.reason})" if maintenance else "maintenance"
    b.go(Phase.MAINTENANCE, MAINTENANCE_REASON, f"{why} {what}".replace(" ()", ""))
    b.set(drain=None, remediation=None, repair_under_test=None)


def begin_remediation(b: Builder, *, escalated: bool = False) -> None:
    """Start the ladder: only on a node seen cordoned and empty (or past the drain's
    explicit escalation), never in a dry run, never inside a maintenance window."""
    slurm = b.node.slurm
    slurm_busy = slurm is not None and (slurm.busy or not slurm.out)
    if not b.cordon_observed or ((b.node.workload or slurm_busy) and not escalated):
        return
    if b.status.reason == MAINTENANCE_REASON and worst_finding(b.status) is None:
        hold_for_maintenance(b, "drained for")
        return
    if maintenance_active(b):
        hold_for_maintenance(b, "no remediation starts during")
        return
    if b.dry_run:
        b.condition(
            "Remediation", ConditionStatus.FALSE, "DryRun", "dry run: no remediation is started"
        )
        return
    if b.status.phase is not Phase.REMEDIATING:
        admission = safety.admit_remediation(b.policy.spec.safety, b.fleet)
        if not admission.allowed:
            b.refused(admission)
            return
    if lemon(b):
        retire_lemon(b)
        return
    klass = fault_class(b)
    held = b.status.repair_under_test
    # A repair its validation found wanting did not hold: the next rung, not the first.
    step = held.step + 1 if held is not None and held.fault_class is klass else 0
    b.set(repair_under_test=None)
    start_step(b, klass, step=step, attempt=1)


def start_step(b: Builder, klass: FaultClass, *, step: int, attempt: int) -> None:
    rung = b.policy.spec.remediation.ladders.rung(klass, step)
    if rung is None:
        retire(b, "LadderExhausted", f"every remediation for {klass} faults failed")
        return
    if rung.action is RemediationAction.RETIRE:
        retire(b, "LadderRetire", f"the {klass} ladder ends in retire")
        return
    key = remediation_key(b.node.name, step, attempt, b.now)
    finding = worst_finding(b.status)
    b.go(
        Phase.REMEDIATING,
        f"Remediation{''.join(p.capitalize() for p in rung.action.split('-'))}",
        f"{rung.action} (step {step + 1}, attempt {attempt}/{rung.attempts})",
    )
    b.set(
        remediation=RemediationStatus(
            action=rung.action,
            fault_class=klass,
            step=step,
            attempt=attempt,
            started_at=b.now,
            reference=key,
            boot_id=b.node.boot_id,
            awaiting_release=rung.action is RemediationAction.RESET_GPU,
        ),
        remediations=[*b.status.remediations, b.now][-100:],
        drain=None,
    )
    b.wake(b.now + rung.timeout)
    if rung.action is RemediationAction.RESET_GPU:
        b.actions.append(
            a.Record(
                reason="ReleaseRequested",
                message=f"{rung.action} attempt {attempt} waits for the agent to release "
                f"the GPUs (NVML), at most {RELEASE_WAIT}",
            )
        )
        b.wake(b.now + RELEASE_WAIT)
        return
    b.actions.append(
        a.Remediate(
            action=rung.action,
            step=step,
            attempt=attempt,
            key=key,
            gpus=finding.gpus if finding else (),
            message=f"{rung.action} attempt {attempt}",
        )
    )


def start_released(b: Builder, remediation: RemediationStatus) -> RemediationStatus:
    """The reset Job of a rung awaiting the agent's release: created once the agent
    says it closed NVML for this rung, or once :data:`RELEASE_WAIT` passed without an
    answer. Until then the rung's timeout runs as for any other rung."""
    released = b.status.checks.released == remediation.reference
    if not released and not elapsed(b, remediation.started_at, RELEASE_WAIT, inclusive=True):
        return remediation
    remediation = remediation.model_copy(update={"awaiting_release": False})
    b.set(remediation=remediation)
    finding = worst_finding(b.status)
    how = (
        "the agent released the GPUs"
        if released
        else f"the agent did not release the GPUs within {RELEASE_WAIT} (not running?)"
    )
    b.actions.append(
        a.Remediate(
            action=remediation.action,
            step=remediation.step,
            attempt=remediation.attempt,
            key=remediation.reference,
            gpus=finding.gpus if finding else (),
            message=f"{remediation.action} attempt {remediation.attempt}: {how}",
        )
    )
    return remediation


def resume(b: Builder, remediation: RemediationStatus) -> None:
    """A rung another process recorded and this one has not started: start it again
    if that is safe (idempotent for its key: an existing Job is found, a webhook
    receiver drops the repeat), so a start the API never saw is not left to time
    out. A reboot is not repeated; its evidence (a new boot ID) or its timeout
    decides, as the package says."""
    if b.state.rung_started or remediation.confirmed or remediation.error:
        return
    if remediation.awaiting_release or any(isinstance(x, a.Remediate) for x in b.actions):
        return  # its Job waits for the agent's release, or was just created after it
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


def remediating(b: Builder) -> None:
    remediation = b.status.remediation
    b.ensure_cordon(QUARANTINE_TAINT, b.status.reason or "Remediating", "Remediating")
    if maintenance_active(b):
        hold_for_maintenance(b, "the remediation ladder stops for")
        return
    if remediation is None:
        begin_remediation(b)
        return
    if remediation.awaiting_release and not b.dry_run:
        remediation = start_released(b, remediation)
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
    resume(b, remediation)
    reported = bool(remediation.confirmed) and b.status.checks.repair == remediation.reference
    if reported and worst_finding(b.status) is None:
        _repaired(b, remediation)
        return
    ladders = b.policy.spec.remediation.ladders
    timeout = ladders.rung_timeout(remediation.fault_class, remediation.step)
    if not remediation.error and not elapsed(b, remediation.started_at, timeout):
        return
    if b.dry_run:
        b.condition(
            "Remediation", ConditionStatus.FALSE, "DryRun", "dry run: the ladder does not advance"
        )
        return
    if remediation.error:
        why = f"could not start: {remediation.error}"
    else:
        why = f"did not repair the node within {timeout}"
    b.actions.append(
        a.Record(
            reason="RemediationFailed" if remediation.error else "RemediationTimedOut",
            message=f"{remediation.action} attempt {remediation.attempt} {why}",
            warning=True,
        )
    )
    rung = ladders.rung(remediation.fault_class, remediation.step)
    if lemon(b):
        retire_lemon(b)
    elif rung is not None and remediation.attempt < rung.attempts:
        start_step(
            b, remediation.fault_class, step=remediation.step, attempt=remediation.attempt + 1
        )
    else:
        start_step(b, remediation.fault_class, step=remediation.step + 1, attempt=1)


def _repaired(b: Builder, remediation: RemediationStatus) -> None:
    """The repair is seen and the agent reported clean after it: revalidate (burn-in
    after repair) or back into service."""
    if b.policy.spec.validation.burn_in_after_repair:
        start_validation(
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
        back_in_service(b, "Repaired", f"{remediation.action} repaired the node")
        b.set(remediation=None)


def retired(b: Builder) -> None:
    b.ensure_cordon(RETIRED_TAINT, b.status.reason or "Retired", "Retired")
