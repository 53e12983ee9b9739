"""Periodic verification of idle nodes in service: what the probe's evidence says.

A verification runs while the node stays in service: no cordon, and a probe
Job at the probe PriorityClass that takes all the node's GPUs, so any
workload that wants the node preempts it. Its outcome is therefore one
of four, read from evidence only, in this order:

- the probe Job's own report (matched by the Job's name): ``Failed`` when a
  check failed, ``Inconclusive`` when it is no verdict (a check that could not
  run, GPUs not covered), else ``Passed``;
- no report within the validation timeout: ``Inconclusive``;
- workload pods on the node, or a probe pod marked for disruption
  (``PreemptionByScheduler``), or gone without a report: ``Preempted``, which is
  no verdict and never counts against the node;
- a probe pod that failed without a report: ``Inconclusive``.

Pure: the lifecycle applies the outcome (a failing one takes the node out).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from pitcrew.api.gpunode import GPUNodeStatus, VerificationResult
from pitcrew.core.evidence import Finding, probe_incomplete, worst_finding
from pitcrew.core.views import NodeView

POD_GRACE = datetime.timedelta(seconds=60)
"""How long a verification waits for its probe pod to appear on the node. A pod that
is not bound by then (the GPUs are taken by something Pitcrew cannot see) or that is
gone without a report gave way to something: no verdict."""


@dataclass(frozen=True)
class Outcome:
    result: VerificationResult
    message: str
    finding: Finding | None = None
    """The failing checks of a ``Failed`` verification."""
    cancel: bool = False
    """The probe Job may still be running and must be deleted."""


@dataclass(frozen=True)
class Running:
    """No outcome yet: the probe may still report."""

    until: datetime.datetime
    """When waiting alone gives an outcome (the timeout, or the probe pod's grace)."""


def outcome(
    status: GPUNodeStatus, *, node: NodeView, now: datetime.datetime, timeout: datetime.timedelta
) -> Outcome | Running | None:
    """The outcome of the verification in flight, :class:`Running` while it runs, or
    None when none is in flight."""
    verification = status.verification
    if verification is None or not verification.job:
        return None
    probe = status.probe
    if probe is not None and probe.job == verification.job:
        return _reported(status, node=node)
    started = verification.started_at or now
    if now - started >= timeout:
        return Outcome(
            VerificationResult.INCONCLUSIVE, f"no probe report within {timeout}", cancel=True
        )
    gave_way = _gave_way(node, job=verification.job, waited=now - started)
    if gave_way is not None:
        return gave_way
    on_node = any(p.job_name == verification.job for p in node.pods)
    return Running(started + timeout if on_node else started + min(timeout, POD_GRACE))


def _reported(status: GPUNodeStatus, *, node: NodeView) -> Outcome:
    """The verdict of the probe's own report."""
    assert status.probe is not None
    finding = worst_finding(status, probe=True)
    if finding is not None:
        return Outcome(VerificationResult.FAILED, finding.message, finding)
    incomplete = probe_incomplete(status.probe, gpus=node.gpus)
    if incomplete:
        return Outcome(VerificationResult.INCONCLUSIVE, incomplete)
    suite = status.probe.suite or "probe"
    return Outcome(VerificationResult.PASSED, f"{suite} verification passed")


def _gave_way(node: NodeView, *, job: str, waited: datetime.timedelta) -> Outcome | None:
    """Why a probe without a report will not report, or None while it may."""
    if node.workload:
        names = ", ".join(p.key for p in node.workload[:5])
        return Outcome(
            VerificationResult.PREEMPTED, f"workload arrived on the node: {names}", cancel=True
        )
    pods = [p for p in node.pods if p.job_name == job]
    disrupted = next((p for p in pods if p.disruption), None)
    if disrupted is not None:
        why = f"probe pod {disrupted.name} is being removed ({disrupted.disruption})"
        return Outcome(VerificationResult.PREEMPTED, why, cancel=True)
    if any(p.finished and not p.succeeded for p in pods):
        return Outcome(
            VerificationResult.INCONCLUSIVE, "the probe pod failed without a report", cancel=True
        )
    if not pods and waited > POD_GRACE:
        return Outcome(
            VerificationResult.PREEMPTED,
            "the probe pod is not on the node (preempted, evicted or never scheduled)",
            cancel=True,
        )
    return None
