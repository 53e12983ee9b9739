"""Suspect, Quarantined and Draining: out of service, waiting for the node's work to go.

A Suspect node (a degraded finding) keeps its jobs until they checkpoint or
``checkpointMaxDelay`` passes; a Quarantined one (fatal) drains at once, and the
pods of a job that declares a fatal fault loses its progress anyway are deleted
at once rather than evicted. A drain
begins only in a decision that sees Pitcrew's cordon in place (evicting before
would let pods come straight back) and within ``maxConcurrentDrains``; it waits
for pods and Slurm's jobs, and its timeout (the decision's wake-up meanwhile)
does what the policy says: keep waiting, force, or remediate anyway.
"""

from __future__ import annotations

import datetime

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import DrainStatus, Phase
from pitcrew.api.meta import ConditionStatus
from pitcrew.api.policy import DrainTimeoutAction
from pitcrew.api.vocabulary import (
    FAST_GRACE_SECONDS,
    MAINTENANCE_REASON,
    QUARANTINE_TAINT,
    STRAGGLER_REASON,
)
from pitcrew.core import actions as a
from pitcrew.core import safety
from pitcrew.core.evidence import worst_finding
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.lifecycle.facts import (
    checkpointed,
    could_not_check,
    elapsed,
    fault_class,
    maintenance_due,
)
from pitcrew.core.lifecycle.remediating import begin_remediation
from pitcrew.core.lifecycle.service import back_in_service
from pitcrew.core.lifecycle.slurm import slurm_pending, slurm_timed_out
from pitcrew.core.views import PodView


def quarantine(b: Builder, reason: str, message: str) -> None:
    """Quarantined: cordoned under the quarantine taint, drained as soon as the cordon
    is seen."""
    b.go(Phase.QUARANTINED, reason, message)
    quarantined(b)


def quarantined(b: Builder) -> None:
    b.ensure_cordon(QUARANTINE_TAINT, b.status.reason, b.status.reason)
    if b.status.phase is Phase.QUARANTINED:
        _begin_drain(b, "Quarantined")


def suspect(b: Builder) -> None:
    status, spec = b.status, b.policy.spec
    finding = worst_finding(status)
    # A straggler's verdict came from its job, which a drain will move: no later
    # report clears it, a validation does (after the drain at the next checkpoint).
    # A maintenance window holds the node until it is withdrawn.
    straggling = finding is None and status.reason == STRAGGLER_REASON
    straggling = straggling or (status.reason == MAINTENANCE_REASON and maintenance_due(b))
    if finding is None and not straggling and not could_not_check(status):
        back_in_service(b, "FaultCleared", "the degraded condition cleared")
        return
    # A check that could not run is no evidence the fault cleared: still Suspect.
    if finding is not None and finding.fault_class is FaultClass.FATAL:
        quarantine(b, finding.reason, finding.message)
        return
    b.ensure_cordon(QUARANTINE_TAINT, status.reason, status.reason)
    if checkpointed(b):
        _begin_drain(b, "Checkpointed")
    elif elapsed(
        b, status.phase_since or b.now, spec.safety.drain.checkpoint_max_delay, inclusive=True
    ):
        _begin_drain(b, "CheckpointWaitExpired")


def _begin_drain(b: Builder, why: str) -> None:
    if not b.cordon_observed:
        return  # the cordon is planned, not seen: evicting now would let pods come back
    maintenance = b.status.reason == MAINTENANCE_REASON
    admission = safety.admit_drain(b.policy.spec.safety, b.fleet, maintenance=maintenance)
    if not admission.allowed:
        b.refused(admission)
        return
    b.condition("Admitted", ConditionStatus.TRUE, "Admitted")
    b.go(Phase.DRAINING, b.status.reason, f"{why}: {b.status.message}".strip(": "))
    b.set(drain=DrainStatus(started_at=b.now, pending=[p.key for p in b.node.workload]))
    draining(b)


def draining(b: Builder) -> None:
    if _window_withdrawn(b):
        return
    drain_spec = b.policy.spec.safety.drain
    drain = b.status.drain or DrainStatus(started_at=b.now)
    b.ensure_cordon(QUARANTINE_TAINT, b.status.reason, b.status.reason)
    if not b.cordon_observed:
        return  # someone lifted the cordon: evict only once it is back
    workload = b.node.workload
    terminating = [p for p in b.node.pods if p.terminating and not p.probe]
    pending = [p.key for p in workload + tuple(terminating)] + slurm_pending(b)
    b.set(drain=drain.model_copy(update={"pending": pending[:1024]}))
    if not pending:
        begin_remediation(b)
        return
    workload = _operator_last(workload, pending)
    timed_out = drain_spec.on_timeout is not DrainTimeoutAction.WAIT and elapsed(
        b, drain.started_at, drain_spec.timeout
    )
    if not workload:
        # Evicted pods shutting down, or Slurm's jobs running on. One stuck Terminating
        # (a finalizer, a hung kubelet) or a job that never ends must not hold the
        # drain slot forever: the timeout applies to them.
        if timed_out and terminating:
            _timed_out_on_terminating(b, terminating)
        elif timed_out and (left := slurm_timed_out(b, drain)):
            forced = drain_spec.on_timeout is DrainTimeoutAction.FORCE
            _remediate_anyway(b, "DrainTimeoutSlurm" if forced else "DrainTimeoutEscalate", left)
        return
    if not timed_out:
        _restart_in_place(b, workload, drain.started_at)
        workload = _lost_anyway(b, workload)
        if workload:
            b.actions.append(a.Evict(pods=workload, message=_evicting(workload)))
    elif drain_spec.on_timeout is DrainTimeoutAction.FORCE:
        _restart_in_place(b, workload, drain.started_at)
        b.actions.append(
            a.ForceDelete(
                pods=workload,
                message=f"drain timed out after {drain_spec.timeout}: deleting "
                f"{len(workload)} pods",
            )
        )
    else:
        _remediate_anyway(b, "DrainTimeoutEscalate", f"{len(workload)} pods left")


def _operator_last(workload: tuple[PodView, ...], pending: list[str]) -> tuple[PodView, ...]:
    """The pods to move now: the operator's own pod only once nothing else is left.

    The operator evicting its own pod ends itself (the leader) in the middle of the
    plan: evicted beside the others, it may die before their eviction or the drain's
    status is written, and the next leader would find a drain half done and not
    recorded. Evicted last and alone, its plan is one whose status goes first
    (:mod:`pitcrew.controller.executor`): the next leader (a standby, or this pod's
    replacement elsewhere) reads a drain whose only pending pod is the old leader,
    and goes on from there. The operator's budget (the chart's, ``maxUnavailable: 1``)
    holds that eviction until another replica is ready."""
    mine = tuple(p for p in workload if p.operator)
    if mine and len(pending) > len(mine):
        return tuple(p for p in workload if not p.operator)
    return workload


def _evicting(workload: tuple[PodView, ...]) -> str:
    if len(workload) == 1 and workload[0].operator:
        return f"evicting the operator's own pod {workload[0].key}, last"
    return f"evicting {len(workload)} pods"


def _restart_in_place(b: Builder, leaving: tuple[PodView, ...], since: datetime.datetime) -> None:
    """The training jobs that lose their pods here and declare in-place restarts: their
    pods elsewhere are asked to restart in place (:mod:`pitcrew.core.in_place`). Planned
    ahead of the eviction, so the request goes out with it, and the simulator's job
    knows it restarts in place before the eviction stops it."""
    for namespace, job in sorted({(p.namespace, p.job) for p in leaving if p.restarts_in_place}):
        b.actions.append(
            a.RestartInPlace(
                namespace=namespace,
                job=job,
                since=since,
                message=f"job {namespace}/{job} loses its pods on {b.node.name}: its pods "
                "elsewhere are asked to restart in place",
            )
        )


def _lost_anyway(b: Builder, workload: tuple[PodView, ...]) -> tuple[PodView, ...]:
    """On a node with a fatal fault, delete at once the pods whose job declares that such
    a fault loses its progress anyway (``pitcrew.dev/progress-lost-on-fault``): no grace
    period to wait out and no budget to ask, since nothing they would save is worth the
    wait, and the job's restart elsewhere begins the sooner. The rest to evict."""
    if fault_class(b) is not FaultClass.FATAL:
        return workload
    lost = tuple(p for p in workload if p.progress_lost)
    if not lost:
        return workload
    jobs = ", ".join(sorted({f"{p.namespace}/{p.job}" for p in lost}))[:300]
    b.actions.append(
        a.ForceDelete(
            pods=lost,
            reason="ProgressLostOnFault",
            message=f"{len(lost)} pods of jobs that lose their progress on a fatal fault "
            f"anyway ({jobs}): deleted at once",
            grace_seconds=FAST_GRACE_SECONDS,
        )
    )
    return tuple(p for p in workload if not p.progress_lost)


def _window_withdrawn(b: Builder) -> bool:
    """A drain for a maintenance window stops, and the node goes back in service, as
    soon as the window no longer calls for it (deleted, moved later, or ended while the
    drain waited): evicting on would move work for maintenance nobody will do. A
    fault found meanwhile keeps the drain going."""
    if b.status.reason != MAINTENANCE_REASON or worst_finding(b.status) is not None:
        return False
    if maintenance_due(b):
        return False
    window = b.node.maintenance
    why = "withdrawn" if window is None else f"{window.name} no longer due"
    b.set(drain=None)
    back_in_service(b, "MaintenanceWithdrawn", f"maintenance {why}: the drain stopped")
    return True


def _timed_out_on_terminating(b: Builder, terminating: list[PodView]) -> None:
    spec = b.policy.spec.safety.drain
    names = ", ".join(p.key for p in terminating)[:500]
    if spec.on_timeout is DrainTimeoutAction.FORCE:
        b.actions.append(
            a.ForceDelete(
                pods=tuple(terminating),
                message=f"drain timed out after {spec.timeout} on terminating pods",
            )
        )
    stuck = f"{len(terminating)} pods stuck terminating ({names})"
    _remediate_anyway(b, "DrainTimeoutTerminating", stuck)


def _remediate_anyway(b: Builder, reason: str, left: str) -> None:
    """The drain's timeout passed with ``left`` still on the node: the rung starts, and
    what is left dies with the repair."""
    timeout = b.policy.spec.safety.drain.timeout
    b.actions.append(
        a.Record(
            reason=reason,
            message=f"drain timed out after {timeout} with {left}: remediating anyway",
            warning=True,
        )
    )
    begin_remediation(b, escalated=True)
