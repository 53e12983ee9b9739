"""What a node's reports and its Node show: the evidence decisions are taken on.

Pure functions of a GPUNode status and a Node view, shared by the lifecycle
(passive findings, validation probes, repairs) and periodic verification, so
that one report is read the same way wherever it is judged.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from gpuhealth.report import CheckStatus, FaultClass
from pitcrew.api.gpunode import ChecksStatus, GPUNodeStatus, RemediationStatus
from pitcrew.api.policy import RemediationAction
from pitcrew.core.views import NodeView

WATCH_ESCALATES_AFTER = datetime.timedelta(hours=1)
"""An application or watch finding still failing after this long is treated as a
degraded fault: one XID 13 is a user's bug, the same XID on the same GPU for an hour,
job after job, is the GPU."""
SEVERITY = {FaultClass.FATAL: 2, FaultClass.DEGRADED: 1}


@dataclass(frozen=True)
class Finding:
    fault_class: FaultClass
    reason: str
    message: str
    gpus: tuple[int, ...]


def worst_finding(status: GPUNodeStatus, *, probe: bool = False) -> Finding | None:
    """The most severe failing check of the latest report (and of the latest probe
    report, with ``probe``), or None."""
    results = list(status.checks.results)
    if probe and status.probe is not None:
        results.extend(status.probe.results)
    failing = [c for c in results if c.status is CheckStatus.FAIL and c.fault_class in SEVERITY]
    persistent = {(w.check, w.gpu) for w in status.watching if w.escalated}
    failing += [
        c.model_copy(
            update={
                "fault_class": FaultClass.DEGRADED,
                "name": f"{c.name}-persistent",
                "message": f"{c.message or c.name} (for over {WATCH_ESCALATES_AFTER})",
            }
        )
        for c in status.checks.results
        if c.status is CheckStatus.FAIL and (c.name, c.gpu) in persistent
    ]
    if not failing:
        return None
    worst = max(SEVERITY[c.fault_class] for c in failing)
    top = [c for c in failing if SEVERITY[c.fault_class] == worst]
    first = top[0]
    reason = "".join(part.capitalize() for part in first.name.split("-"))
    gpus = tuple(sorted({c.gpu for c in top if c.gpu is not None}))
    message = "; ".join(sorted({c.message or c.name for c in top}))[:1000]
    return Finding(first.fault_class, reason, message, gpus)


def repair_evidence(node: NodeView, remediation: RemediationStatus) -> str:
    """What shows that the rung's repair happened, or empty. A remediator's word that it
    *started* is not evidence: a reset Job that never ran, or a BMC that accepted a
    reboot and did nothing, must not read as a repair. Evidence is a reset Job pod
    that succeeded on the node, or, for every rung that reboots or reprovisions the
    machine, a boot ID other than the one the node had when the rung started."""
    if remediation.action is RemediationAction.RESET_GPU:
        done = any(p.job_name == remediation.reference and p.succeeded for p in node.pods)
        return f"reset Job {remediation.reference} succeeded" if done else ""
    if remediation.boot_id and node.boot_id and node.boot_id != remediation.boot_id:
        return f"the node rebooted (boot ID {remediation.boot_id[:8]} -> {node.boot_id[:8]})"
    return ""


def probe_done(status: GPUNodeStatus) -> bool:
    """The probe this validation started has reported: matched by the Job's name, so
    a node whose clock runs behind or ahead of the operator's neither waits for ever
    nor reuses an old report."""
    probe = status.probe
    return probe is not None and bool(status.probe_job) and probe.job == status.probe_job


def probe_incomplete(probe: ChecksStatus, *, gpus: int) -> str:
    """Why a probe report is no verdict, or empty: a check that could not run (a CUDA
    error on a broken GPU, NVML missing, an unknown model) is not a pass, and neither
    is a probe that saw fewer GPUs than the node has (right after a reboot)."""
    errors = [r for r in probe.results if r.status is CheckStatus.ERROR]
    if errors:
        return (
            "probe could not run: "
            + "; ".join(f"{r.name}: {r.message or 'error'}" for r in errors)[:900]
        )
    if not probe.results:
        return "probe reported no results"
    seen = {r.gpu for r in probe.results if r.gpu is not None}
    if gpus and len(seen) < gpus:
        return f"probe tested {len(seen)} of the node's {gpus} GPUs"
    return ""
