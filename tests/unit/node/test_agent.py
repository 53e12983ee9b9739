"""The agent forgets latched findings on a confirmed repair, and says which in its reports."""

from __future__ import annotations

import datetime
import json

from prometheus_client import REGISTRY

from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.models import get_model
from gpuhealth.report import CheckResult, CheckStatus
from gpuhealth.runner import Checker
from pitcrew.api.gpunode import AgentChecks
from pitcrew.api.vocabulary import LAST_REMEDIATION
from pitcrew.node.agent import AgentCore, agent_status
from pitcrew.node.findings import fingerprint, verdicts


def core() -> AgentCore:
    backend = SimBackend(node="n0", model=get_model("H100"), gpus=8)
    checker = Checker(backend=backend, node="n0", expect=Expectations(gpus=8))
    return AgentCore(
        api=None,  # type: ignore[arg-type]
        node="n0",
        node_uid="u",
        checker=checker,
        heartbeat=datetime.timedelta(minutes=5),
    )


def confirmed(key: str) -> dict[str, str]:
    return {LAST_REMEDIATION: json.dumps({"action": "reset-gpu", "key": key})}


def test_a_confirmed_repair_is_noted_once_and_carried_by_the_next_reports() -> None:
    agent = core()
    agent.last_write = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)  # running a while
    assert agent.note_remediation(confirmed("fix-1"))
    assert not agent.note_remediation(confirmed("fix-1"))
    report = agent.checker.run()
    status = agent_status(report, agent.checker, repair=agent.remediation_key or "")
    assert status.checks.repair == "fix-1"
    found = verdicts(report.checks, {})
    gpus = [g.index for g in status.gpus]
    # the ack alone is worth a write
    assert fingerprint(found, gpus=gpus, repair="fix-1") != fingerprint(found, gpus=gpus, repair="")


def test_an_agent_started_after_the_repair_reports_it_without_replaying_it() -> None:
    agent = core()
    assert not agent.note_remediation(confirmed("fix-1"))  # nothing latched yet to forget
    assert agent.remediation_key == "fix-1"


def test_a_garbled_annotation_is_ignored() -> None:
    agent = core()
    assert not agent.note_remediation({LAST_REMEDIATION: "not json"})
    assert not agent.note_remediation({LAST_REMEDIATION: json.dumps({"key": 7})})
    assert agent.remediation_key is None


def test_readings_that_move_are_no_change_a_finding_that_moves_is() -> None:
    agent = core()
    report = agent.checker.run()
    status = agent_status(report, agent.checker)
    warmer = status.model_copy(
        update={
            "checks": status.checks.model_copy(
                update={
                    "results": [
                        r.model_copy(update={"observed": (r.observed or 0) + 3.5, "message": "x"})
                        for r in status.checks.results
                    ]
                }
            ),
            "gpus": [g.model_copy(update={"temperature_c": 71.0}) for g in status.gpus],
        }
    )
    assert verdicts(warmer.checks.results, {}) == verdicts(status.checks.results, {})
    first = status.checks.results[0]
    failed = status.model_copy(
        update={
            "checks": status.checks.model_copy(
                update={
                    "results": [
                        first.model_copy(update={"status": CheckStatus.FAIL}),
                        *status.checks.results[1:],
                    ]
                }
            )
        }
    )
    assert verdicts(failed.checks.results, {}) != verdicts(status.checks.results, {})


def test_a_check_that_could_not_run_keeps_its_verdict() -> None:
    failing = [CheckResult(name="ecc", status=CheckStatus.FAIL, gpu=1, fault_class="fatal")]
    errored = [CheckResult(name="ecc", status=CheckStatus.ERROR, gpu=1, message="NVML ecc")]
    passing = [CheckResult(name="ecc", status=CheckStatus.PASS, gpu=1)]
    before = verdicts(failing, {})
    assert before
    assert verdicts(errored, before) == before  # still failing: no write, no false clear
    assert verdicts(errored, {}) == {}  # still healthy: no write
    assert verdicts(passing, before) == {}  # a reading that passes clears it


def test_a_failing_check_gauge_goes_back_to_zero_when_the_check_stops_failing() -> None:
    agent = core()
    report = agent.checker.run()
    status = agent_status(report, agent.checker)
    failing = report.model_copy(
        update={
            "checks": [
                *report.checks,
                CheckResult(name="ecc", status=CheckStatus.FAIL, gpu=1),
            ]
        }
    )
    agent._export(failing, status)
    assert (
        REGISTRY.get_sample_value("pitcrew_agent_failing_checks", {"node": "n0", "check": "ecc"})
        == 1
    )
    agent._export(report, status)  # the repaired GPU's report has no failing ecc at all
    assert (
        REGISTRY.get_sample_value("pitcrew_agent_failing_checks", {"node": "n0", "check": "ecc"})
        == 0
    )


def published(**fields: object) -> AgentChecks:
    return AgentChecks.model_validate({"interval": "10s", "heartbeat": "1m", **fields})


def failing(agent: AgentCore) -> set[tuple[str, int | None, str]]:
    report = agent.checker.run()
    return {(c.name, c.gpu, c.fault_class.value) for c in report.checks if c.status is FAIL}


FAIL = CheckStatus.FAIL


def test_the_published_checks_are_what_the_agent_runs_from_the_next_sweep() -> None:
    agent = core()
    assert failing(agent) == set()
    assert agent.configure(published(thresholds={"ib.expected_rate_gbps": 800}))
    assert (agent.interval, agent.heartbeat) == (
        datetime.timedelta(seconds=10),
        datetime.timedelta(minutes=1),
    )
    assert ("ib", None, "degraded") in failing(agent)  # 400 Gb/s ports now fall short
    agent.configure(published(thresholds={"ib.expected_rate_gbps": 800}, disabled=["ib"]))
    assert failing(agent) == set()
    agent.configure(published(expectedGpus=9))
    assert failing(agent) == {("gpu-count", None, "fatal")}
    assert not agent.configure(published(expectedGpus=9))  # the same: nothing to do


def test_checks_an_agent_cannot_run_are_refused_whole() -> None:
    agent = core()
    agent.configure(published(expectedGpus=9))
    assert not agent.configure(published(disabled=["from-a-newer-operator"]))
    assert failing(agent) == {("gpu-count", None, "fatal")}  # the last good one stays
    assert agent.interval == datetime.timedelta(seconds=10)


def test_the_agent_follows_a_spec_change_and_skips_status_only_events() -> None:
    agent = core()
    gpunode = {
        "metadata": {"name": "n0", "generation": 2},
        "spec": {"nodeName": "n0", "checks": {"interval": "10s", "heartbeat": "1m"}},
    }
    assert agent.follow(gpunode)
    assert agent.interval == datetime.timedelta(seconds=10)
    status_write = {**gpunode, "spec": {"nodeName": "n0", "checks": {"interval": "99s"}}}
    assert not agent.follow(status_write)  # same generation: a status write, not parsed
    changed = {
        "metadata": {"name": "n0", "generation": 3},
        "spec": {"nodeName": "n0", "checks": {"interval": "20s", "heartbeat": "1m"}},
    }
    assert agent.follow(changed)
    assert agent.interval == datetime.timedelta(seconds=20)
