"""Validating: a probe Job tests the node under the validating taint.

The verdict is the probe's own report, matched by the Job's name. A report
that is no verdict (a check that could not run, GPUs not covered), a probe pod
that failed, or no report within the validation timeout spends one of
``PROBE_ATTEMPTS``; a probe whose pod never reached the node proved nothing and
is started again under the same attempt. A failing validation quarantines the
node, within the breaker; a passing one puts it in service, or holds it for a
ValidationRun's pair tests.
"""

from __future__ import annotations

from pitcrew.api.gpunode import Phase, VerificationResult, VerificationStatus
from pitcrew.api.vocabulary import VALIDATING_TAINT
from pitcrew.core import actions as a
from pitcrew.core import safety
from pitcrew.core.evidence import probe_done, probe_incomplete, worst_finding
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.lifecycle.draining import quarantine
from pitcrew.core.lifecycle.facts import elapsed
from pitcrew.core.lifecycle.probes import PROBE_ATTEMPTS, start_probe
from pitcrew.core.lifecycle.service import back_in_service


def validating(b: Builder) -> None:
    status, spec = b.status, b.policy.spec
    _evict_late_arrivals(b)
    if not probe_done(status):
        _awaiting_probe(b)
        _keep_validating_cordon(b)
        return
    assert status.probe is not None  # probe_done
    finding = worst_finding(status, probe=True)
    incomplete = "" if finding else probe_incomplete(status.probe, gpus=b.node.gpus)
    if incomplete:
        _retry_probe(b, "ProbeIncomplete", incomplete)
        _keep_validating_cordon(b)
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
        back_in_service(b, "ValidationPassed", f"{suite} validation passed")
        b.set(repair_under_test=None)
        return
    admission = safety.admit_unhealthy(
        spec.safety, b.fleet, now=b.now, cooldown_until=b.policy.cooldown_until
    )
    if not admission.allowed:
        # Out of service already (cordoned, Validating), but the breaker's count
        # must hold for this path too: it stays Validating until a slot is free.
        b.refused(admission)
        b.ensure_cordon(VALIDATING_TAINT, status.reason or "Validating", "Validating")
        return
    quarantine(b, finding.reason, f"validation failed: {finding.message}")


def _keep_validating_cordon(b: Builder) -> None:
    if b.status.phase is Phase.VALIDATING:
        b.ensure_cordon(VALIDATING_TAINT, b.state.status.reason or "Validating", "Validating")


def _retry_probe(b: Builder, reason: str, why: str) -> None:
    """Start the next probe of this validation, or, when they are used up, take the
    node out: a node that cannot be validated must not go into service untested."""
    attempts = b.status.probe_attempts
    if attempts >= PROBE_ATTEMPTS:
        quarantine(b, "ValidationNotPossible", f"{why} ({attempts} probes, none a verdict)")
        return
    b.actions.append(
        a.Record(
            reason=reason,
            message=f"{why}; starting probe {attempts + 1} of {PROBE_ATTEMPTS}",
            warning=True,
        )
    )
    b.set(phase_since=b.now)
    start_probe(b, attempt=attempts + 1)


def _evict_late_arrivals(b: Builder) -> None:
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
                pods=late,
                reason="LateArrivalEvicted",
                message=f"bound after the cordon, evicted from a node under validation: {names}",
            )
        )


def _awaiting_probe(b: Builder) -> None:
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
    if not elapsed(b, status.phase_since, timeout):
        return
    if pods:
        _retry_probe(b, "ValidationTimedOut", f"no probe result within {timeout}")
        return
    if status.probe_job:
        b.actions.append(
            a.CancelProbe(
                name=status.probe_job,
                reason="ProbeNotStarted",
                message=f"its pod never reached the node within {timeout}; "
                f"not counted, attempt {status.probe_attempts} starts again",
            )
        )
    b.set(phase_since=b.now)
    start_probe(b, attempt=status.probe_attempts)
