"""What a carried-out decision adds to the operator's counters and histograms."""

from __future__ import annotations

import datetime

from prometheus_client import REGISTRY

from gpuhealth.report import FaultClass
from pitcrew.api.gpunode import DrainStatus, Phase, RemediationStatus, Transition
from pitcrew.api.policy import RemediationAction
from pitcrew.controller.metrics import record_decision
from support.lifecycle_data import T0, report, status


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_quarantine_counts_a_transition_and_the_detection_latency() -> None:
    before = status(Phase.HEALTHY)
    after = status(Phase.QUARANTINED, checks=report(at=T0)).model_copy(
        update={"reason": "XidFatal"}
    )
    count = sample("pitcrew_detection_to_quarantine_seconds_count", pool="m1")
    record_decision(pool="m1", before=before, after=after, now=T0 + datetime.timedelta(seconds=2))
    labels = {
        "pool": "m1",
        "from_phase": "Healthy",
        "to_phase": "Quarantined",
        "reason": "XidFatal",
    }
    assert sample("pitcrew_phase_transitions_total", **labels) == 1
    assert sample("pitcrew_detection_to_quarantine_seconds_count", pool="m1") == count + 1
    assert sample("pitcrew_detection_to_quarantine_seconds_sum", pool="m1") == 2.0


def test_a_finished_drain_and_a_remediation_rung_that_worked() -> None:
    started = T0 - datetime.timedelta(minutes=5)
    draining = status(Phase.DRAINING).model_copy(update={"drain": DrainStatus(started_at=started)})
    rung = RemediationStatus(
        action=RemediationAction.RESET_GPU,
        fault_class=FaultClass.FATAL,
        step=0,
        attempt=1,
        started_at=T0,
        reference="reset-1",
    )
    remediating = status(Phase.REMEDIATING).model_copy(update={"remediation": rung})
    record_decision(pool="m2", before=draining, after=remediating, now=T0)
    assert sample("pitcrew_drain_duration_seconds_sum", pool="m2") == 300.0
    assert (
        sample("pitcrew_remediations_total", pool="m2", action="reset-gpu", result="started") == 1
    )
    validating = status(Phase.VALIDATING)
    record_decision(
        pool="m2", before=remediating, after=validating, now=T0 + datetime.timedelta(seconds=90)
    )
    assert (
        sample("pitcrew_remediations_total", pool="m2", action="reset-gpu", result="succeeded") == 1
    )
    assert sample("pitcrew_remediation_duration_seconds_sum", pool="m2", action="reset-gpu") == 90.0


def test_time_to_repair_runs_from_leaving_service_to_the_confirmed_repair() -> None:
    left = T0 - datetime.timedelta(minutes=20)
    history = [
        Transition(time=left, from_phase=Phase.HEALTHY, to_phase=Phase.QUARANTINED, reason="Xid"),
        Transition(time=T0, from_phase=Phase.DRAINING, to_phase=Phase.REMEDIATING, reason="Xid"),
    ]
    rung = RemediationStatus(
        action=RemediationAction.REBOOT,
        fault_class=FaultClass.DEGRADED,
        step=1,
        attempt=1,
        started_at=T0,
        reference="reboot-1",
    )
    remediating = status(Phase.REMEDIATING).model_copy(
        update={"remediation": rung, "history": history}
    )
    labels = {"pool": "m4", "fault_class": "degraded", "action": "reboot"}
    record_decision(
        pool="m4",
        before=remediating,
        after=status(Phase.VALIDATING),
        now=T0 + datetime.timedelta(minutes=10),
    )
    assert sample("pitcrew_time_to_repair_seconds_count", **labels) == 1
    assert sample("pitcrew_time_to_repair_seconds_sum", **labels) == 30 * 60
