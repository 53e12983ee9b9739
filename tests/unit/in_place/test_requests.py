"""The operator's shell asks a job's survivors to restart in place, once per drain."""

from __future__ import annotations

import datetime

from prometheus_client import REGISTRY

from pitcrew.api.gpunode import Phase
from support.in_place_pods import RULE, training_pod
from support.shell_fakes import Shell, healthy_status, policy_object, version

POLICY = policy_object()


def counted() -> float:
    return REGISTRY.get_sample_value("pitcrew_restarts_in_place_requested_total") or 0.0


def job_on_three_nodes(*, declares: bool = True) -> Shell:
    shell = Shell(nodes={f"n{i}": healthy_status() for i in range(3)}, policy=POLICY)
    for i in range(3):
        pod = training_pod(f"r{i}", f"n{i}", rules=(RULE,) if declares else ())
        pod["metadata"]["resourceVersion"] = version()
        shell.store.put("pod", pod)
    shell.settle()
    return shell


def drain_n0(shell: Shell) -> None:
    shell.fail("n0")
    for _ in range(6):
        shell.now += datetime.timedelta(seconds=1)
        shell.round()


def test_the_survivors_are_asked_once_and_the_evicted_pod_never() -> None:
    shell = job_on_three_nodes()
    before = counted()
    drain_n0(shell)  # the drain is decided again in each round while r0 is still there
    assert shell.phase("n0") is Phase.DRAINING
    (request,) = shell.cluster.writes("request_restart")
    keys, value = request
    assert keys == ["train/r1", "train/r2"]
    assert value == shell.store.status("n0").drain.started_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert counted() - before == 2
    asked = [ref.name for ref, reason, _, _ in shell.events.posted if reason == "RestartRequested"]
    assert asked == ["r1", "r2"]
    assert "RestartInPlace" in shell.events.reasons("Node")


def test_a_job_that_declares_no_rule_is_left_to_its_launcher() -> None:
    shell = job_on_three_nodes(declares=False)
    drain_n0(shell)
    assert shell.phase("n0") is Phase.DRAINING
    assert shell.cluster.writes("request_restart") == []
    assert ["train/r0"] in shell.cluster.writes("evict")
