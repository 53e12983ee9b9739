"""What a decision reads of the node before it acts: findings, windows, checkpoints.

Pure reads of a :class:`~pitcrew.core.lifecycle.builder.Builder`, shared by the
phase handlers. Those that compare ``now`` with a time report that time as a
wake-up, so a handler that asks "is maintenance due?" also learns when it will be.
"""

from __future__ import annotations

import datetime

from gpuhealth.report import CheckStatus, FaultClass
from pitcrew.api.gpunode import GPUNodeStatus, Phase
from pitcrew.api.vocabulary import HANG_REASON, MAINTENANCE_REASON, STRAGGLER_REASON
from pitcrew.core.evidence import Finding, worst_finding
from pitcrew.core.lifecycle.builder import Builder

KERNEL_LOG_CHECK = "kernel-log"
"""The result the xid check adds when kernel-log lines could not be parsed."""


def finding(b: Builder) -> Finding | None:
    """What takes a node in service out: its job's verdict that the job hung on it (a
    fatal fault: the job is already stopped, no checkpoint will come), else its worst
    failing check, else its job's verdict that it is the straggler (a degraded fault no
    check of its own sees)."""
    if b.state.hang:
        return Finding(FaultClass.FATAL, HANG_REASON, b.state.hang, ())
    found = worst_finding(b.status)
    if found is None and b.state.straggler:
        return Finding(FaultClass.DEGRADED, STRAGGLER_REASON, b.state.straggler, ())
    return found


def could_not_check(status: GPUNodeStatus) -> bool:
    return any(c.status is CheckStatus.ERROR for c in status.checks.results)


def maintenance_due(b: Builder) -> bool:
    """A window covers the node and starts within ``checkpointMaxDelay``: time for its
    jobs' next checkpoint before the work begins."""
    window = b.node.maintenance
    if window is None or window.over(b.now):
        return False
    lead_in = window.start - b.policy.spec.safety.drain.checkpoint_max_delay
    b.wake(lead_in)
    b.wake(window.end)
    return b.now >= lead_in


def maintenance_over(b: Builder) -> bool:
    """The window the node was drained for ended, was withdrawn, or moved later than
    ``checkpointMaxDelay`` ahead: a window that covers the node next week does not keep
    it out now (back-to-back windows, one starting within the lead, do)."""
    window = b.node.maintenance
    if window is None:
        return True
    return not maintenance_due(b)


def maintenance_active(b: Builder) -> bool:
    """A window covers the node now: it has begun (a NodeMaintenance, which has no
    schedule, from the moment it exists, whatever the clocks say) and not ended. People
    work on the node: no remediation rung may start."""
    window = b.node.maintenance
    if window is None or window.over(b.now):
        return False
    b.wake(window.end)
    if window.end is None:
        return True
    b.wake(window.start)
    return b.now >= window.start


def maintenance_finding(b: Builder) -> Finding:
    window = b.node.maintenance
    assert window is not None  # maintenance_due
    why = f"{window.name} from {window.start:%Y-%m-%dT%H:%M:%SZ}"
    return Finding(
        FaultClass.DEGRADED, MAINTENANCE_REASON, f"{why}: {window.reason}".rstrip(": "), ()
    )


def checkpointed(b: Builder) -> bool:
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


def fault_class(b: Builder) -> FaultClass:
    """The class whose ladder the node climbs: the remediation's, else its finding's,
    else what its phase implies."""
    if b.status.remediation is not None:
        return b.status.remediation.fault_class
    found = worst_finding(b.status)
    if found is not None:
        return found.fault_class
    if b.status.reason and b.status.phase is Phase.QUARANTINED:
        return FaultClass.FATAL
    return FaultClass.DEGRADED


def lemon(b: Builder) -> bool:
    """Remediated ``maxRemediations`` times within the lemon window."""
    spec = b.policy.spec.remediation.lemon
    recent = [t for t in b.status.remediations if b.now - t < spec.window]
    return len(recent) >= spec.max_remediations


def spares_wanted(b: Builder) -> int:
    return b.fleet.spares_wanted(b.policy.spec.spares.count)


def elapsed(
    b: Builder,
    since: datetime.datetime | None,
    limit: datetime.timedelta,
    *,
    inclusive: bool = False,
) -> bool:
    """Whether ``limit`` has passed since ``since`` (more than it; with ``inclusive``,
    at least it); until then the deadline is the decision's wake-up. A time never
    set has not passed."""
    if since is None:
        return False
    b.wake(since + limit)
    waited = b.now - since
    return waited >= limit if inclusive else waited > limit
