"""Periodic verification of idle nodes in service: start one when due, judge it, stop it.

Runs after the phase's handler in every decision. A verification never cordons:
its probe takes all the node's GPUs at a preemptible priority, so any workload
that wants the node takes it back (:mod:`pitcrew.core.verification` reads the
outcome). A node that left service stops its verification at once: a probe must
not hold the GPUs a reset or a validation needs. At most ``maxConcurrent`` nodes
of a pool verify at once.
"""

from __future__ import annotations

import datetime

from pitcrew.api.gpunode import VerificationResult, VerificationStatus
from pitcrew.api.vocabulary import IN_SERVICE, RESERVED_TAINT
from pitcrew.core import actions as a
from pitcrew.core import safety
from pitcrew.core import verification as verify
from pitcrew.core.evidence import Finding
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.lifecycle.in_service import take_out
from pitcrew.core.names import verification_name

INCONCLUSIVE_RETRY = datetime.timedelta(minutes=1)
"""How soon a verification that gave no verdict is tried again, once."""


def verification(b: Builder) -> None:
    """Judge the verification in flight, or start one on an idle node in service that
    is due, within ``maxConcurrent``."""
    current = b.status.verification
    in_flight = current is not None and bool(current.job)
    if b.status.phase not in IN_SERVICE:
        if in_flight:
            _stop(b)
    elif in_flight:
        _judge(b)
    elif b.policy.spec.validation.periodic.enabled:
        _start(b)
    elif current is not None and current.next is not None:
        b.set(verification=current.model_copy(update={"next": None}))


def _stop(b: Builder) -> None:
    current = b.status.verification
    assert current is not None
    b.set(verification=current.model_copy(update={"job": "", "started_at": None}))
    b.actions.append(
        a.CancelProbe(
            name=current.job,
            message=f"verification stopped: the node is {b.status.phase} ({b.status.reason})",
        )
    )


def _start(b: Builder) -> None:
    periodic = b.policy.spec.validation.periodic
    current = b.status.verification or VerificationStatus()
    if current.next is None:
        # Never verified under this policy: due now; maxConcurrent spreads the pool out.
        current = current.model_copy(update={"next": b.now})
        b.set(verification=current)
    node = b.node
    assert current.next is not None
    b.wake(current.next)
    due = current.next <= b.now
    # A node in Slurm's service is verified by Slurm's HealthCheckProgram (gpuhealth
    # slurm): a probe pod would race Slurm, which knows nothing of it, for the GPUs.
    in_slurm = node.slurm is not None and not node.slurm.out
    idle = not (node.busy or in_slurm or node.unschedulable or node.validation_requested)
    # A spare reserved for a job keeps its GPUs for the job's pod.
    idle = idle and not node.has_taint(RESERVED_TAINT)
    # Busy, cordoned by someone, held by a run or not Ready: it stays due until it is not.
    if not due or not idle or not node.ready or b.dry_run or node.gpus == 0:
        return
    admission = safety.admit_verification(periodic, b.fleet)
    if not admission.allowed:
        b.held = True
        return
    name = verification_name(node.name, b.now)
    b.set(verification=current.model_copy(update={"job": name, "started_at": b.now}))
    b.wake(b.now + min(b.policy.spec.validation.timeout, verify.POD_GRACE))
    b.actions.append(
        a.StartProbe(
            suite=periodic.suite.value,
            name=name,
            reason="VerificationStarted",
            message=f"{periodic.suite} verification of idle node {node.name} "
            "(preemptible, no cordon)",
        )
    )


def _judge(b: Builder) -> None:
    current = b.status.verification
    assert current is not None
    spec = b.policy.spec.validation
    found = verify.outcome(b.status, node=b.node, now=b.now, timeout=spec.timeout)
    if found is None:
        return
    if isinstance(found, verify.Running):
        b.wake(found.until)
        return
    later = b.now + _next_verification(spec.periodic.interval, current, found.result)
    b.set(
        verification=VerificationStatus(
            last_time=b.now, last_result=found.result, message=found.message[:1024], next=later
        )
    )
    b.wake(later)
    if found.cancel:
        b.actions.append(a.CancelProbe(name=current.job, message=found.message))
    b.actions.append(
        a.Record(
            reason=f"Verification{found.result}",
            message=f"verification {current.job}: {found.message}",
            warning=found.result in (VerificationResult.FAILED, VerificationResult.INCONCLUSIVE),
        )
    )
    if found.finding is not None:
        failed = found.finding
        take_out(
            b,
            Finding(
                failed.fault_class,
                failed.reason,
                f"periodic verification failed: {failed.message}",
                failed.gpus,
            ),
            quarantined=True,
        )


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
