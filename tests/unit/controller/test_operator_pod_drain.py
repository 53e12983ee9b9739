"""A drain of the node the operator runs on evicts the operator's own pod last, alone,
and only once the status that says so is written: the leader that ends itself leaves
no drain half done and unrecorded, and the next leader finishes it."""

from __future__ import annotations

from typing import Any

from pitcrew.api.gpunode import Phase
from pitcrew.api.settings import DEFAULT_NAMESPACE
from support.shell_fakes import Shell, healthy_status, policy_object, version

OPERATOR = "pitcrew-operator-7d9c-x2x4q"
OPERATOR_KEY = f"{DEFAULT_NAMESPACE}/{OPERATOR}"
POLICY = policy_object(
    remediation={"ladders": {"fatal": [{"action": "reset-gpu", "timeout": "10m"}]}}
)


def pod(namespace: str, name: str, owner: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "resourceVersion": version(),
            "ownerReferences": [{"kind": owner, "controller": True, "name": "owner"}],
        },
        "spec": {"nodeName": "n0"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def operator_on_its_node() -> Shell:
    """The leader's pod and a trainer on n0, which reports a fatal fault."""
    shell = Shell(nodes={"n0": healthy_status()}, policy=POLICY, identity=OPERATOR)
    shell.settle()
    shell.store.put("pod", pod("train", "trainer-0", "Job"))
    shell.store.put("pod", pod(DEFAULT_NAMESPACE, OPERATOR, "ReplicaSet"))
    shell.cluster.calls.clear()
    shell.fail("n0")
    for _ in range(3):
        shell.round("n0")
    return shell


def evicted(shell: Shell) -> list[list[str]]:
    """The evictions asked, call by call (an evicted pod still listed is held by the
    budget ledger, not asked again: an empty call)."""
    return [keys for keys in shell.cluster.writes("evict") if keys]


def test_the_other_pods_are_evicted_first_and_the_operator_stays() -> None:
    shell = operator_on_its_node()
    assert shell.phase("n0") is Phase.DRAINING
    assert evicted(shell) == [["train/trainer-0"]]
    drain = shell.store.status("n0").drain
    assert drain is not None
    assert sorted(drain.pending) == sorted(["train/trainer-0", OPERATOR_KEY])


def test_the_operator_is_evicted_alone_once_the_rest_is_gone_after_its_status() -> None:
    shell = operator_on_its_node()
    shell.store.put("pod", pod("train", "trainer-0", "Job"), deleted=True)
    shell.round("n0")
    assert evicted(shell) == [["train/trainer-0"], [OPERATOR_KEY]]
    calls = [(name, arg) for name, arg in shell.cluster.calls if name != "evict" or arg]
    eviction = calls.index(("evict", [OPERATOR_KEY]))
    assert calls[eviction - 1] == ("apply_gpunode_status", "n0")  # written just before it
    written = shell.cluster.gpunode_statuses["n0"][-1]  # the intent (the progress is held)
    assert written["phase"] == Phase.DRAINING.value
    assert written["drain"]["pending"] == [OPERATOR_KEY]
    assert "Evicted" in shell.events.reasons("Node")


def test_the_next_leader_finds_the_drain_done_and_remediates() -> None:
    shell = operator_on_its_node()
    shell.store.put("pod", pod("train", "trainer-0", "Job"), deleted=True)
    shell.round("n0")
    shell.store.put("pod", pod(DEFAULT_NAMESPACE, OPERATOR, "ReplicaSet"), deleted=True)
    shell.round("n0")
    assert shell.phase("n0") is Phase.REMEDIATING
    assert evicted(shell) == [["train/trainer-0"], [OPERATOR_KEY]]  # nothing evicted twice


def test_outside_a_pod_no_pod_is_the_operators() -> None:
    shell = Shell(nodes={"n0": healthy_status()}, policy=POLICY, identity="laptop")
    shell.settle()
    shell.store.put("pod", pod("train", "trainer-0", "Job"))
    shell.store.put("pod", pod(DEFAULT_NAMESPACE, OPERATOR, "ReplicaSet"))
    shell.fail("n0")
    for _ in range(3):
        shell.round("n0")
    assert [sorted(keys) for keys in evicted(shell)] == [sorted([OPERATOR_KEY, "train/trainer-0"])]
