"""Periodic verification of idle nodes: started only when due, idle and within
``maxConcurrent``, never with a cordon; judged from evidence only; a failing one takes
the node out, a preempted one is no verdict."""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import Any

from gpuhealth.report import CheckResult, CheckStatus, FaultClass
from pitcrew.api.gpunode import (
    ChecksStatus,
    GPUNodeStatus,
    Phase,
    VerificationResult,
    VerificationStatus,
)
from pitcrew.api.vocabulary import QUARANTINE_TAINT, SPARE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.fleet import after_decision
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.names import verification_name
from pitcrew.core.verification import POD_GRACE
from pitcrew.core.views import FleetView, NodeView, PodView, PolicyView, Taint
from support.lifecycle_data import (
    T0,
    finding,
    fleet,
    node,
    pod,
    policy,
    report,
    state,
    status,
)

JOB = verification_name("gpu-node-0001", T0)
INTERVAL = datetime.timedelta(hours=1)


def periodic(**fields: Any) -> PolicyView:
    return policy(
        validation={
            "priorityClassName": "pitcrew-probe",
            "periodic": {"enabled": True, **fields},
        }
    )


def idle(**fields: Any) -> NodeView:
    return replace(node(), gpus=8, **fields)


def probe_pod(**fields: Any) -> PodView:
    return PodView(namespace="pitcrew-system", name=f"{JOB}-x", probe=True, job_name=JOB, **fields)


def verifying(**fields: Any) -> GPUNodeStatus:
    return status(verification=VerificationStatus(next=T0, job=JOB, started_at=T0), **fields)


def probe_report(*results: CheckResult, job: str = JOB) -> ChecksStatus:
    every_gpu = [CheckResult(name="gemm", status=CheckStatus.PASS, gpu=g) for g in range(8)]
    return ChecksStatus(report_time=T0, suite="quick", results=[*every_gpu, *results], job=job)


def run(
    view: NodeView,
    node_status: GPUNodeStatus,
    *,
    at: datetime.datetime = T0,
    pool: PolicyView | None = None,
    fleet_view: FleetView | None = None,
    dry_run: bool = False,
) -> Decision:
    return decide(
        state=state(view, node_status),
        policy=pool or periodic(),
        fleet=fleet_view or fleet(),
        now=at,
        dry_run=dry_run,
    )


def started(decision: Decision) -> list[a.StartProbe]:
    return [
        x
        for x in decision.actions
        if isinstance(x, a.StartProbe) and x.reason == "VerificationStarted"
    ]


def cancelled(decision: Decision) -> list[str]:
    return [x.name for x in decision.actions if isinstance(x, a.CancelProbe)]


def test_an_idle_node_never_verified_is_verified_at_once_without_a_cordon() -> None:
    decision = run(idle(), status())
    (probe,) = started(decision)
    assert (probe.name, probe.suite, probe.reason) == (JOB, "quick", "VerificationStarted")
    assert decision.phase is Phase.HEALTHY
    assert not [x for x in decision.actions if isinstance(x, a.Cordon | a.SetTaint)]
    verification = decision.status.verification
    assert verification is not None
    assert (verification.job, verification.started_at, verification.next) == (JOB, T0, T0)


def test_a_busy_node_is_not_verified_and_stays_due() -> None:
    decision = run(idle(pods=(pod("trainer-0"),)), status())
    assert not started(decision)
    assert decision.status.verification == VerificationStatus(next=T0)


def test_a_node_that_is_not_due_is_left_alone() -> None:
    later = T0 + datetime.timedelta(minutes=30)
    decision = run(idle(), status(verification=VerificationStatus(next=later)))
    assert not decision.actions


def test_cordoned_held_not_ready_gpu_less_or_dry_run_nodes_are_not_verified() -> None:
    views = [
        replace(idle(), unschedulable=True),
        replace(idle(), annotations={"pitcrew.dev/validation-run": "run-1"}, taints=()),
        idle(ready=False),
        replace(idle(), gpus=0),
    ]
    for view in views:
        assert not started(run(view, status())), view
    assert not started(run(idle(), status(), dry_run=True))


def test_max_concurrent_bounds_the_verifications_of_a_pool() -> None:
    # 5 % of 10 nodes rounds to one node.
    assert not started(run(idle(), status(), fleet_view=replace(fleet(), verifying=1)))
    many = periodic(maxConcurrent=3)
    assert started(run(idle(), status(), pool=many, fleet_view=replace(fleet(), verifying=2)))
    assert not started(run(idle(), status(), pool=many, fleet_view=replace(fleet(), verifying=3)))


def test_a_verification_in_flight_counts_in_the_fleet_the_next_decision_sees() -> None:
    before = status()
    decision = run(idle(), before)
    assert after_decision(fleet(), node="gpu-node-0001", before=before, decision=decision).verifying
    done = run(idle(), verifying(probe=probe_report()), at=T0 + datetime.timedelta(minutes=2))
    assert (
        after_decision(
            replace(fleet(), verifying=1), node="gpu-node-0001", before=verifying(), decision=done
        ).verifying
        == 0
    )


def test_a_running_verification_decided_again_does_nothing() -> None:
    decision = run(idle(pods=(probe_pod(),)), verifying(), at=T0 + datetime.timedelta(minutes=5))
    assert not decision.actions
    assert decision.status.verification == verifying().verification


def test_a_passing_report_is_recorded_and_the_next_is_due_an_interval_later() -> None:
    at = T0 + datetime.timedelta(minutes=3)
    decision = run(idle(pods=(probe_pod(),)), verifying(probe=probe_report()), at=at)
    assert decision.status.verification == VerificationStatus(
        last_time=at,
        last_result=VerificationResult.PASSED,
        message="quick verification passed",
        next=at + INTERVAL,
    )
    assert decision.phase is Phase.HEALTHY
    assert not cancelled(decision)
    assert "VerificationPassed" in [x.reason for x in decision.actions]


def test_a_report_of_another_job_is_not_this_verification() -> None:
    old = probe_report(finding(FaultClass.DEGRADED, name="gemm"), job="pitcrew-probe-old-1")
    decision = run(idle(pods=(probe_pod(),)), verifying(probe=old), at=T0 + POD_GRACE * 2)
    assert decision.phase is Phase.HEALTHY
    assert not decision.actions


def test_a_failing_verification_takes_the_idle_node_out_at_once() -> None:
    slow = finding(FaultClass.DEGRADED, name="gemm", gpu=5)
    at = T0 + datetime.timedelta(minutes=3)
    decision = run(idle(pods=(probe_pod(),)), verifying(probe=probe_report(slow)), at=at)
    # Degraded, yet Quarantined: the evidence is the probe's, and the node is idle.
    assert decision.phase is Phase.QUARANTINED
    assert decision.status.reason == "Gemm"
    assert decision.status.message.startswith("periodic verification failed: ")
    assert [x.taint for x in decision.actions if isinstance(x, a.Cordon)] == [QUARANTINE_TAINT]
    verification = decision.status.verification
    assert verification is not None
    assert verification.last_result is VerificationResult.FAILED
    assert (verification.job, verification.next) == ("", at + INTERVAL)
    assert "VerificationFailed" in [x.reason for x in decision.actions]


def test_a_failing_verification_the_breaker_refuses_is_recorded_and_the_node_kept() -> None:
    slow = finding(FaultClass.DEGRADED, name="gemm", gpu=5)
    decision = run(
        idle(pods=(probe_pod(),)),
        verifying(probe=probe_report(slow)),
        pool=policy(
            validation={"priorityClassName": "p", "periodic": {"enabled": True}},
            safety={"maxUnhealthy": 1},
        ),
        fleet_view=fleet(quarantined=1),
    )
    assert decision.phase is Phase.HEALTHY
    assert decision.status.verification is not None
    assert decision.status.verification.last_result is VerificationResult.FAILED
    assert "CircuitBreakerOpen" in [x.reason for x in decision.actions]


def test_a_workload_arriving_preempts_the_verification_which_is_no_verdict() -> None:
    at = T0 + datetime.timedelta(minutes=4)
    decision = run(idle(pods=(pod("trainer-0"),)), verifying(), at=at)
    assert decision.phase is Phase.HEALTHY
    assert cancelled(decision) == [JOB]
    verification = decision.status.verification
    assert verification is not None
    assert verification.last_result is VerificationResult.PREEMPTED
    assert "train/trainer-0" in verification.message
    assert (verification.job, verification.next) == ("", at + INTERVAL)


def test_a_probe_pod_the_scheduler_preempts_is_no_verdict() -> None:
    evicted = probe_pod(terminating=True, disruption="PreemptionByScheduler")
    decision = run(idle(pods=(evicted,)), verifying(), at=T0 + datetime.timedelta(seconds=5))
    assert decision.status.verification is not None
    assert decision.status.verification.last_result is VerificationResult.PREEMPTED
    assert "PreemptionByScheduler" in decision.status.verification.message


def test_a_probe_pod_that_is_gone_is_no_verdict_once_its_grace_has_passed() -> None:
    assert not run(idle(), verifying(), at=T0 + POD_GRACE).actions
    gone = run(idle(), verifying(), at=T0 + POD_GRACE + datetime.timedelta(seconds=1))
    assert gone.status.verification is not None
    assert gone.status.verification.last_result is VerificationResult.PREEMPTED
    assert cancelled(gone) == [JOB]


def test_a_probe_that_could_not_run_or_timed_out_is_inconclusive_and_the_node_stays() -> None:
    crashed = CheckResult(name="hbm", status=CheckStatus.ERROR, gpu=2, message="CUDA error")
    cases = {
        "could not run": (verifying(probe=probe_report(crashed)), T0, [probe_pod()]),
        "failed pod": (verifying(), T0, [probe_pod(finished=True)]),
        "timed out": (verifying(), T0 + datetime.timedelta(minutes=30), [probe_pod()]),
    }
    for case, (node_status, at, pods) in cases.items():
        decision = run(idle(pods=tuple(pods)), node_status, at=at)
        assert decision.phase is Phase.HEALTHY, case
        assert decision.status.verification is not None
        assert decision.status.verification.last_result is VerificationResult.INCONCLUSIVE, case
        reasons = [x.reason for x in decision.actions]
        assert "VerificationInconclusive" in reasons, case


def test_a_first_verification_without_a_verdict_is_tried_again_soon_a_second_waits() -> None:
    """A transient NVML error in the probe is no evidence either way: tried again in a
    minute, once; two in a row wait the interval (a probe that cannot run on this node
    must not keep its GPUs busy)."""
    crashed = CheckResult(name="ecc", status=CheckStatus.ERROR, message="NVML Unknown Error")
    first = run(idle(pods=(probe_pod(),)), verifying(probe=probe_report(crashed)))
    assert first.status.verification is not None
    assert first.status.verification.next == T0 + datetime.timedelta(minutes=1)
    before = VerificationStatus(
        last_result=VerificationResult.INCONCLUSIVE, next=T0, job=JOB, started_at=T0
    )
    again = run(idle(pods=(probe_pod(),)), status(verification=before, probe=probe_report(crashed)))
    assert again.status.verification is not None
    assert again.status.verification.next == T0 + datetime.timedelta(hours=1)


def test_a_node_that_leaves_service_mid_verification_stops_the_probe() -> None:
    fatal = report(finding(FaultClass.FATAL, name="xid"))
    decision = run(idle(pods=(probe_pod(),)), verifying(checks=fatal))
    assert decision.phase is Phase.QUARANTINED
    assert cancelled(decision) == [JOB]
    assert decision.status.verification is not None
    assert decision.status.verification.job == ""


def test_an_idle_spare_is_verified_too() -> None:
    spare = idle(taints=(Taint(SPARE_TAINT, "true"),))
    decision = run(spare, status(Phase.SPARE), pool=periodic(), fleet_view=fleet(spares=()))
    assert decision.phase is Phase.SPARE
    assert started(decision)


def test_turning_periodic_off_clears_the_due_time_and_starts_nothing() -> None:
    decision = run(idle(), status(verification=VerificationStatus(next=T0)), pool=policy())
    assert not decision.actions
    assert decision.status.verification == VerificationStatus()


def test_a_passed_validation_counts_as_a_verification() -> None:
    passed = ChecksStatus(report_time=T0, suite="standard", results=probe_report().results)
    at = T0 + datetime.timedelta(minutes=10)
    decision = run(idle(), status(Phase.VALIDATING, probe=passed), at=at)
    assert decision.phase is Phase.HEALTHY
    verification = decision.status.verification
    assert verification is not None
    assert (verification.last_result, verification.next) == (
        VerificationResult.PASSED,
        at + INTERVAL,
    )
    assert not started(decision)
