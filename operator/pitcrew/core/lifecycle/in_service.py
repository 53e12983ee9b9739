"""Pending, Healthy, Spare, Maintenance and Excluded: where a node takes work or waits to.

A node in service leaves it for one of three reasons: a finding (its worst
failing check, or its job's straggler verdict), a maintenance window about to
start, or a ValidationRun that asks for it. Taking it out passes the circuit
breaker first (:func:`take_out`); kept in service, it carries no Pitcrew cordon.
A Spare is a validated node kept free by its taint; it goes back to work when
the pool holds more spares than it wants, or serves the training job that lost a
node, or else one whose pods wait for capacity (:mod:`.reserved`): reserved for it,
Healthy, until the job's pod lands there.
"""

from __future__ import annotations

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import Phase
from pitcrew.api.meta import ConditionStatus
from pitcrew.api.vocabulary import (
    IN_SERVICE,
    MAINTENANCE_REASON,
    MANAGED_LABEL,
    QUARANTINE_TAINT,
    SPARE_TAINT,
    VALIDATING_TAINT,
)
from pitcrew.core import actions as a
from pitcrew.core import safety
from pitcrew.core.evidence import Finding, worst_finding
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.lifecycle.draining import quarantine, suspect
from pitcrew.core.lifecycle.facts import (
    finding,
    maintenance_due,
    maintenance_finding,
    maintenance_over,
    spares_wanted,
)
from pitcrew.core.lifecycle.probes import start_validation
from pitcrew.core.lifecycle.reserved import lend, offer_spares, reservation, reserved
from pitcrew.core.lifecycle.service import hold_as_spare, lift_cordon


def take_out(b: Builder, found: Finding, *, quarantined: bool = False) -> bool:
    """Move a node in service to Suspect (degraded) or Quarantined (fatal, or with
    ``quarantined``: evidence from a probe, which no later passive report repeats, on
    an idle node that has no checkpoint to wait for), if the breaker admits it; for a
    maintenance window, if the maintenance budget does (the breaker is for faults)."""
    spec = b.policy.spec
    if found.reason == MAINTENANCE_REASON:
        admission = safety.admit_maintenance(spec.safety, b.fleet)
    else:
        admission = safety.admit_unhealthy(
            spec.safety, b.fleet, now=b.now, cooldown_until=b.policy.cooldown_until
        )
    if not admission.allowed:
        already_refused = any(
            c.type == "Admitted" and c.reason == admission.reason for c in b.status.conditions
        )
        b.refused(admission)
        if not already_refused:
            b.actions.append(
                a.Record(
                    reason=admission.reason,
                    message=f"not taking {b.node.name} out: {admission.message} "
                    f"({found.reason}: {found.message})",
                    warning=True,
                )
            )
        if b.status.phase in IN_SERVICE:
            # Kept in service means in service: no leftover Pitcrew cordon.
            lift_cordon(b, admission.reason, "kept in service: Pitcrew's cordon lifted")
        return False
    b.condition("Admitted", ConditionStatus.TRUE, "Admitted")
    if b.status.phase in IN_SERVICE and b.node.name not in b.fleet.spares:
        offer_spares(b, found)
    b.set(reservation=None)  # a reserved node taken out serves nobody
    if found.fault_class is FaultClass.FATAL or quarantined:
        quarantine(b, found.reason, found.message)
    else:
        b.go(Phase.SUSPECT, found.reason, found.message)
        suspect(b)
    return True


def pending(b: Builder) -> None:
    status, spec = b.status, b.policy.spec
    if status.checks.report_time is None:
        b.go(Phase.PENDING, "WaitingForAgent", "no health report from the node agent yet")
        return
    found = worst_finding(status)
    joined_later = b.node.created > b.policy.created
    if joined_later and spec.validation.burn_in_on_join:
        start_validation(b, "BurnInOnJoin", "new node: burn-in before it takes work")
    elif found is not None:
        b.go(Phase.HEALTHY, "Adopted", "in service before the policy")
        take_out(b, found)
    else:
        reason = "JoinedHealthy" if joined_later else "Adopted"
        b.go(Phase.HEALTHY, reason, "passive checks passed")


def healthy(b: Builder) -> None:
    found = finding(b)
    if found is None and maintenance_due(b):
        found = maintenance_finding(b)
    if found is not None:
        take_out(b, found)
        return
    b.condition("Admitted", ConditionStatus.TRUE, "Admitted")
    if b.node.validation_requested:
        _requested_validation(b)
        return
    # Level-triggered: a node in service carries no Pitcrew cordon, whatever
    # left one behind (a request withdrawn while the node was busy, a lost write).
    lift_cordon(b, "InService", "node is healthy: Pitcrew's cordon lifted")
    if reserved(b):
        return  # kept for the job that lost a node: not a spare, not released
    if (
        b.status.phase is Phase.HEALTHY
        and len(b.fleet.spares) < spares_wanted(b)
        and not b.node.busy
        and not b.node.unschedulable
    ):
        hold_as_spare(b, "HeldAsSpare", "idle validated node held back as a hot spare")
    elif b.status.phase is Phase.HEALTHY and b.node.has_taint(SPARE_TAINT):
        # A spare taint on a Healthy node (its Spare status write was lost): it
        # would keep work off a node the fleet counts as taking work.
        b.actions.append(
            a.RemoveTaint(
                taint=SPARE_TAINT,
                reason="InService",
                message="a Healthy node carries no spare taint",
            )
        )


def _requested_validation(b: Builder) -> None:
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
    start_validation(b, "ValidationRun", "requested by a ValidationRun")


def spare(b: Builder) -> None:
    if finding(b) is not None or b.node.validation_requested or maintenance_due(b):
        healthy(b)
        return
    if job := reservation(b.node):
        b.go(Phase.HEALTHY, "SpareReserved", f"reserved for job {job}, which lost a node")
        healthy(b)
        return
    if not b.node.has_taint(SPARE_TAINT):
        b.go(Phase.HEALTHY, "SpareReleased", "spare taint removed: node takes work")
    elif len(b.fleet.spares) > spares_wanted(b):
        b.go(Phase.HEALTHY, "SpareSurplus", "more spares than the policy asks for")
        b.actions.append(
            a.RemoveTaint(taint=SPARE_TAINT, reason="SpareSurplus", message="spare taint removed")
        )
    else:
        lend(b)


def maintenance(b: Builder) -> None:
    """Drained for a window: kept out (findings while people work on it are not
    acted on) until the window ends or is withdrawn, then revalidated."""
    b.ensure_cordon(QUARANTINE_TAINT, MAINTENANCE_REASON, MAINTENANCE_REASON)
    if maintenance_over(b):
        start_validation(
            b, "MaintenanceEnded", "the maintenance window ended: revalidating before it takes work"
        )


def excluded(b: Builder) -> None:
    b.go(Phase.PENDING, "OptedIn", f"{MANAGED_LABEL} label no longer false")
    pending(b)
