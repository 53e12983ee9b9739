"""Validation passes only on a verdict: the right probe, every GPU, nothing that could not run."""

from __future__ import annotations

import datetime
from dataclasses import replace

from gpuhealth.report import CheckResult, CheckStatus
from pitcrew.api.gpunode import ChecksStatus, Phase
from pitcrew.api.vocabulary import VALIDATING_TAINT
from pitcrew.core import actions as a
from pitcrew.core.lifecycle import PROBE_ATTEMPTS, decide
from pitcrew.core.views import NodeView, PodView
from support.lifecycle_data import (
    T0,
    fleet,
    node,
    pitcrew_cordoned,
    pod,
    policy,
    report,
    state,
    status,
)

LATER = T0 + datetime.timedelta(minutes=1)
JOB = "pitcrew-probe-n-1"


def validating_node(gpus: int = 8) -> NodeView:
    return replace(pitcrew_cordoned(node(), VALIDATING_TAINT), gpus=gpus)


def probe_of(*results: CheckResult, job: str = JOB, at: datetime.datetime = LATER) -> ChecksStatus:
    return ChecksStatus(
        report_time=at, backend="nvml", suite="standard", results=list(results), job=job
    )


def passing(gpus: int) -> list[CheckResult]:
    return [CheckResult(name="gemm", status=CheckStatus.PASS, gpu=g) for g in range(gpus)]


def decide_validating(probe: ChecksStatus, *, attempts: int = 1, gpus: int = 8) -> object:
    return decide(
        state=state(
            validating_node(gpus),
            status(Phase.VALIDATING, probe=probe, probe_job=JOB, probe_attempts=attempts),
        ),
        policy=policy(),
        fleet=fleet(validating=1),
        now=LATER,
    )


def test_a_probe_that_could_not_run_is_retried_not_passed() -> None:
    crashed = probe_of(
        *passing(7), CheckResult(name="gemm", status=CheckStatus.ERROR, gpu=7, message="CUDA error")
    )
    decision = decide_validating(crashed)
    assert decision.phase is Phase.VALIDATING
    (start,) = [x for x in decision.actions if isinstance(x, a.StartProbe)]
    assert decision.status.probe_job == start.name != JOB
    assert decision.status.probe_attempts == 2
    assert "CUDA error" in next(
        x.message for x in decision.actions if x.reason == "ProbeIncomplete"
    )


def test_a_probe_that_saw_fewer_gpus_than_the_node_has_is_no_verdict() -> None:
    decision = decide_validating(probe_of(*passing(6)))
    assert decision.phase is Phase.VALIDATING
    assert "6 of the node's 8 GPUs" in next(
        x.message for x in decision.actions if isinstance(x, a.Record)
    )


def test_a_complete_passing_probe_of_the_awaited_job_returns_the_node_to_service() -> None:
    decision = decide_validating(probe_of(*passing(8)))
    assert decision.phase is Phase.HEALTHY


def test_a_node_that_cannot_be_validated_is_taken_out_after_its_last_attempt() -> None:
    crashed = probe_of(CheckResult(name="backend", status=CheckStatus.ERROR, message="no NVML"))
    decision = decide_validating(crashed, attempts=PROBE_ATTEMPTS)
    assert decision.phase is Phase.QUARANTINED
    assert decision.status.reason == "ValidationNotPossible"


def probe_pod(job: str, *, failed: bool = False) -> PodView:
    """The pod of probe Job ``job`` on the node: running, or ended without success."""
    return PodView(
        namespace="pitcrew", name=f"{job}-x7k2p", probe=True, job_name=job, finished=failed
    )


def test_the_validation_timeout_escalates_instead_of_retrying_for_ever() -> None:
    stale = probe_of(*passing(8), job="an-older-probe")
    phases = []
    current = status(Phase.VALIDATING, since=T0, probe=stale, probe_job=JOB, probe_attempts=1)
    moment = T0
    for _ in range(PROBE_ATTEMPTS + 1):
        moment += datetime.timedelta(minutes=31)
        running = replace(validating_node(), pods=(probe_pod(current.probe_job),))
        decision = decide(state=state(running, current), policy=policy(), fleet=fleet(), now=moment)
        current = decision.status
        phases.append(decision.phase)
    assert phases[: PROBE_ATTEMPTS - 1] == [Phase.VALIDATING] * (PROBE_ATTEMPTS - 1)
    assert Phase.QUARANTINED in phases


def test_a_probe_whose_pod_never_reached_the_node_costs_time_not_an_attempt() -> None:
    """A starved Job controller or scheduler proves nothing about the node: each
    timeout replaces the Job under the same attempt number, and the node, cordoned
    and Validating all along, is never taken out as ValidationNotPossible for it."""
    current = status(Phase.VALIDATING, since=T0, probe_job=JOB, probe_attempts=2)
    moment = T0
    for _ in range(PROBE_ATTEMPTS + 2):
        moment += datetime.timedelta(minutes=31)
        old = current.probe_job
        decision = decide(
            state=state(validating_node(), current), policy=policy(), fleet=fleet(), now=moment
        )
        assert decision.phase is Phase.VALIDATING
        (cancel,) = [x for x in decision.actions if isinstance(x, a.CancelProbe)]
        (start,) = [x for x in decision.actions if isinstance(x, a.StartProbe)]
        assert (cancel.name, cancel.reason) == (old, "ProbeNotStarted")
        assert "never reached the node" in cancel.message
        assert decision.status.probe_job == start.name != old
        assert decision.status.probe_attempts == 2
        current = decision.status


def test_a_probe_pod_that_failed_without_a_report_is_an_attempt_spent_at_once() -> None:
    current = status(Phase.VALIDATING, since=T0, probe_job=JOB, probe_attempts=1)
    failed = replace(validating_node(), pods=(probe_pod(JOB, failed=True),))
    # Well within the timeout: no waiting it out for a pod that has ended.
    decision = decide(state=state(failed, current), policy=policy(), fleet=fleet(), now=LATER)
    assert decision.phase is Phase.VALIDATING
    (start,) = [x for x in decision.actions if isinstance(x, a.StartProbe)]
    assert decision.status.probe_job == start.name != JOB
    assert decision.status.probe_attempts == 2
    assert "failed without a report" in next(
        x.message for x in decision.actions if x.reason == "ProbeFailed"
    )
    last = status(Phase.VALIDATING, since=T0, probe_job=JOB, probe_attempts=PROBE_ATTEMPTS)
    decision = decide(state=state(failed, last), policy=policy(), fleet=fleet(), now=LATER)
    assert decision.status.reason == "ValidationNotPossible"


def test_a_running_probe_pod_is_waited_for_until_the_timeout() -> None:
    current = status(Phase.VALIDATING, since=T0, probe_job=JOB, probe_attempts=1)
    running = replace(validating_node(), pods=(probe_pod(JOB),))
    decision = decide(state=state(running, current), policy=policy(), fleet=fleet(), now=LATER)
    assert decision.phase is Phase.VALIDATING
    assert not [x for x in decision.actions if isinstance(x, a.StartProbe | a.CancelProbe)]


def test_a_report_of_another_probe_never_counts_whatever_its_time() -> None:
    ahead = probe_of(*passing(8), job="an-older-probe", at=LATER + datetime.timedelta(days=1))
    decision = decide_validating(ahead)
    assert decision.phase is Phase.VALIDATING
    assert not [x for x in decision.actions if isinstance(x, a.StartProbe)]


def test_a_passing_report_of_the_awaited_probe_counts_with_a_node_clock_behind() -> None:
    behind = probe_of(*passing(8), at=T0 - datetime.timedelta(hours=6))
    assert decide_validating(behind).phase is Phase.HEALTHY


def test_the_agent_report_alone_never_validates() -> None:
    decision = decide(
        state=state(validating_node(), status(Phase.VALIDATING, checks=report(at=LATER))),
        policy=policy(),
        fleet=fleet(),
        now=LATER,
    )
    assert decision.phase is Phase.VALIDATING


def test_pods_bound_after_the_cordon_are_evicted_from_a_node_under_validation() -> None:
    """The scheduler placed them while the node was in service; the bind landed after
    the cordon. They would run on an unvalidated node and hold the probe's GPUs."""
    current = status(Phase.VALIDATING, since=T0, probe_job=JOB, probe_attempts=1)
    late = pod("trainer-7")
    cordoned = replace(validating_node(), pods=(late, probe_pod(JOB)))
    decision = decide(state=state(cordoned, current), policy=policy(), fleet=fleet(), now=LATER)
    (evict,) = [x for x in decision.actions if isinstance(x, a.Evict)]
    assert evict.pods == (late,)
    assert decision.phase is Phase.VALIDATING
    # Not before the cordon is seen: evicted then, they could come straight back.
    uncordoned = replace(cordoned, unschedulable=False)
    decision = decide(state=state(uncordoned, current), policy=policy(), fleet=fleet(), now=LATER)
    assert not [x for x in decision.actions if isinstance(x, a.Evict)]
