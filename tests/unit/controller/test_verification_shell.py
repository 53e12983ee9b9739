"""Periodic verification through the round loop and the executor, with fakes:
``maxConcurrent`` holds across one round and across plans in flight; outcomes are
counted, and a probe that must stop is deleted."""

from __future__ import annotations

import copy
import datetime

from prometheus_client import REGISTRY

from gpuhealth.report import CheckResult, CheckStatus
from pitcrew.api.gpunode import ChecksStatus, GPUNodeStatus
from support.shell_fakes import HeldPool, Shell, healthy_status, policy_object, version

POLICY = policy_object(
    validation={
        "priorityClassName": "pitcrew-probe",
        "periodic": {"enabled": True, "maxConcurrent": 2},
    }
)


def node_status() -> GPUNodeStatus:
    return healthy_status().model_copy(update={"gpu_count": 8})


def verify_jobs(shell: Shell) -> list[str]:
    return [
        name
        for call, name in shell.cluster.calls
        if call == "create_job" and str(name).startswith("pitcrew-verify-")
    ]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def report_probe(shell: Shell, node: str) -> None:
    """The probe pod writes its report (the probe's own fields of the status)."""
    written = copy.deepcopy(shell.store.gpunode(node))
    job = written["status"]["verification"]["job"]
    probe = ChecksStatus(
        report_time=shell.now,
        suite="quick",
        job=job,
        results=[CheckResult(name="gemm", status=CheckStatus.PASS, gpu=g) for g in range(8)],
    )
    written["status"]["probe"] = probe.model_dump(mode="json", by_alias=True)
    written["metadata"]["resourceVersion"] = version()
    shell.store.put("gpunode", written)


def test_max_concurrent_holds_within_a_round_and_while_plans_are_in_flight() -> None:
    held = HeldPool()
    shell = Shell(nodes={f"n{i}": node_status() for i in range(4)}, policy=POLICY, pool=held)
    shell.round()
    assert verify_jobs(shell) == []  # the plans are still in flight
    shell.round()  # nothing new: the intended verifications count
    held.release()
    assert len(verify_jobs(shell)) == 2
    shell.round()
    held.release()
    assert len(verify_jobs(shell)) == 2


def test_a_passed_verification_is_counted_with_the_gpu_time_it_held() -> None:
    shell = Shell(nodes={"n0": node_status()}, policy=POLICY)
    shell.round()
    (job,) = verify_jobs(shell)
    passed = sample("pitcrew_verifications_total", pool="fleet", result="Passed")
    held = sample("pitcrew_verification_gpu_seconds_total", pool="fleet")
    shell.now += datetime.timedelta(minutes=10)
    report_probe(shell, "n0")
    shell.round()
    verification = shell.store.status("n0").verification
    assert verification is not None
    assert str(verification.last_result) == "Passed"
    assert sample("pitcrew_verifications_total", pool="fleet", result="Passed") == passed + 1
    gpu_seconds = sample("pitcrew_verification_gpu_seconds_total", pool="fleet") - held
    assert gpu_seconds == 10 * 60 * 8
    assert "VerificationPassed" in shell.events.reasons("Node")
    assert ("delete_job", job) not in shell.cluster.calls  # it exits after its report


def test_a_node_that_fails_a_passive_check_mid_verification_has_its_probe_deleted() -> None:
    shell = Shell(nodes={"n0": node_status()}, policy=POLICY)
    shell.round()
    (job,) = verify_jobs(shell)
    shell.now += datetime.timedelta(seconds=30)
    shell.fail("n0")
    shell.round()
    assert ("delete_job", job) in shell.cluster.calls
    assert "ProbeCancelled" in shell.events.reasons("Node")
    verification = shell.store.status("n0").verification
    assert verification is not None
    assert verification.job == ""
