"""The executor with fakes: intent before the remediator, failures folded back."""

from __future__ import annotations

import datetime
import json

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import LAST_REMEDIATION
from support.lifecycle_data import T0
from support.shell_fakes import Shell, healthy_status, policy_object, version

POLICY = policy_object(
    remediation={"ladders": {"fatal": [{"action": "reset-gpu", "timeout": "10m"}]}}
)


def remediating(**kwargs: object) -> Shell:
    """An idle node with a fatal fault, decided until its first rung is started (the
    reset's Job once the agent released the GPUs)."""
    shell = Shell(nodes={"n0": healthy_status()}, policy=POLICY, **kwargs)  # type: ignore[arg-type]
    shell.settle()
    shell.fail("n0")
    for _ in range(8):
        shell.now += datetime.timedelta(seconds=1)
        shell.release("n0")
        shell.round()
        if shell.remediator.requests:
            break
    return shell


def test_the_remediation_intent_is_written_before_the_remediator_is_called() -> None:
    shell = remediating()
    (request,) = shell.remediator.requests
    assert request.action == "reset-gpu"
    assert request.timeout_seconds == 600
    (intent,) = shell.remediator.intent_at_start
    assert intent is not None
    assert intent["reference"] == request.key  # a new leader sees this rung as started
    assert shell.phase("n0") is Phase.REMEDIATING
    assert shell.cluster.writes("annotate_node") == []  # no repair claimed on its start


def test_a_rung_that_cannot_start_is_folded_into_the_next_decision() -> None:
    shell = remediating(remediator_fails="BMC unreachable")
    assert len(shell.remediator.requests) == 1
    assert ("n0", 0) in shell.requeued
    known = shell.executor.known("n0")
    assert known.remediation is not None
    assert known.remediation.error == "BMC unreachable"
    assert shell.executor.known("n0").remediation.error in ("", None)  # folded in once
    assert "RemediationFailed" in shell.events.reasons("Node")
    assert shell.cluster.writes("annotate_node") == []  # no repair claimed


def test_a_failing_write_requeues_the_node_instead_of_losing_the_plan() -> None:
    shell = Shell(nodes={"n0": healthy_status()}, policy=POLICY)
    shell.settle()
    shell.fail("n0")

    def refuse(*, node: str, status: object) -> object:
        raise ConnectionError("apiserver restarting")

    shell.cluster.apply_gpunode_status = refuse  # type: ignore[method-assign]
    shell.round()
    assert ("n0", 0.5) in shell.requeued
    assert shell.phase("n0") is Phase.HEALTHY  # nothing recorded as done


def test_a_status_that_did_not_change_is_not_written_again() -> None:
    shell = Shell(nodes={"n0": healthy_status()}, policy=POLICY, now=T0)
    shell.settle()
    writes = len(shell.cluster.writes("apply_gpunode_status"))
    shell.round()
    shell.round()
    assert len(shell.cluster.writes("apply_gpunode_status")) == writes


def reset_pod_succeeded(shell: Shell, key: str) -> None:
    """The reset Job's pod ran to completion on the node (what kwok or a kubelet reports)."""
    shell.store.put(
        "pod",
        {
            "metadata": {
                "name": f"{key}-x",
                "namespace": "pitcrew-system",
                "resourceVersion": version(),
                "labels": {"batch.kubernetes.io/job-name": key, "pitcrew.dev/probe": "true"},
                "ownerReferences": [{"kind": "Job", "name": key, "uid": "u", "controller": True}],
            },
            "spec": {"nodeName": "n0"},
            "status": {"phase": "Succeeded"},
        },
    )


def test_a_repair_is_confirmed_to_the_agent_only_on_evidence() -> None:
    shell = remediating()
    (request,) = shell.remediator.requests
    shell.round()
    assert shell.cluster.writes("annotate_node") == []  # started is not repaired
    reset_pod_succeeded(shell, request.key)
    shell.now += datetime.timedelta(seconds=1)
    shell.round()
    (annotated,) = shell.cluster.writes("annotate_node")
    assert json.loads(annotated[1][LAST_REMEDIATION])["key"] == request.key
    remediation = shell.store.status("n0").remediation
    assert remediation is not None
    assert "succeeded" in remediation.confirmed
    assert "RepairConfirmed" in shell.events.reasons("Node")


def test_a_failed_confirmation_is_retried_and_never_starts_the_rung_again() -> None:
    shell = remediating()
    (request,) = shell.remediator.requests
    failures = iter([ConnectionError("apiserver restarting")] * 2)

    def flaky(node: str, annotations: dict[str, str | None]) -> None:
        error = next(failures, None)
        if error is not None:
            raise error
        shell.cluster.calls.append(("annotate_node", (node, dict(annotations))))

    shell.cluster.annotate_node = flaky  # type: ignore[method-assign]
    reset_pod_succeeded(shell, request.key)
    for _ in range(4):
        shell.now += datetime.timedelta(seconds=1)
        shell.round()
    assert len(shell.remediator.requests) == 1  # one reset, whatever the annotation did
    assert len(shell.cluster.writes("annotate_node")) == 1
    assert [s for n, s in shell.requeued if n == "n0"][:2] == [0.5, 1.0]
    known = shell.executor.known("n0")
    assert known.remediation is not None
    assert not known.remediation.error


def test_a_node_whose_plan_keeps_failing_is_retried_with_growing_backoff() -> None:
    shell = Shell(nodes={"n0": healthy_status()}, policy=POLICY)
    shell.settle()

    def refuse(*, node: str, status: object) -> object:
        raise ConnectionError("apiserver restarting")

    shell.cluster.apply_gpunode_status = refuse  # type: ignore[method-assign]
    shell.fail("n0")
    for _ in range(4):
        shell.round()
    delays = [seconds for node, seconds in shell.requeued if node == "n0"]
    assert delays == [0.5, 1.0, 2.0, 4.0]


def test_a_process_whose_lease_is_not_renewed_writes_nothing() -> None:
    """A plan decided while leading, executed once the tenure ran out (a slow or
    throttled apiserver): no cordon, no status, no remediation; the node is requeued
    (the election ends the process, a standby takes over)."""
    shell = Shell(nodes={"n0": healthy_status()}, policy=POLICY)
    shell.settle()
    shell.fail("n0")
    shell.leading = False
    shell.cluster.calls.clear()
    shell.now += datetime.timedelta(seconds=1)
    shell.round()
    assert shell.cluster.calls == []
    assert shell.remediator.requests == []
    assert shell.requeued


def test_a_new_leader_resumes_the_reset_the_old_one_recorded_but_never_started() -> None:
    """The old leader wrote the intent and lost the apiserver before the Job: this
    process, which did not start it, starts it under the same key, once."""
    shell = remediating()
    (first,) = shell.remediator.requests
    successor = Shell(nodes={"n0": shell.store.status("n0")}, policy=POLICY, now=shell.now)
    successor.cluster.objects["node"]["n0"] = shell.store.nodes["n0"]
    successor.rounds.prime()
    for _ in range(3):
        successor.now += datetime.timedelta(seconds=1)
        successor.round()
    (resumed,) = successor.remediator.requests
    assert resumed.key == first.key
    assert "RemediationResumed" in successor.events.reasons("Node")
