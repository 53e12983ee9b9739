"""The executor asks for the evictions the watched budgets allow, holds the ones it
made until a watched version of the budget lists them, and goes on when the budget
allows more."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pitcrew.api.gpunode import Phase
from pitcrew.controller.executor import PROGRESS_EVERY, progress_every
from pitcrew.core.budgets import HELD_FOR
from pitcrew.core.port_types import EvictionResult
from support.shell_fakes import T0, Shell, healthy_status, policy_object, version

APP = {"app": "llm"}


def training_pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "train",
            "name": name,
            "labels": APP,
            "resourceVersion": version(),
            "ownerReferences": [{"kind": "ReplicaSet", "controller": True, "name": "rs"}],
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def terminate_evicted(shell: Shell) -> list[str]:
    """Mark every pod evicted so far terminating, as the apiserver does; their names."""
    names = [k.split("/")[1] for keys in shell.cluster.writes("evict") for k in keys]
    for name in names:
        if f"train/{name}" in shell.store.pods:
            leaving = training_pod(name)
            leaving["metadata"]["deletionTimestamp"] = T0.isoformat()
            shell.store.put("pod", leaving)
    return names


def pdb(allowed: int, *, disrupted: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        "metadata": {"namespace": "train", "name": "llm", "resourceVersion": version()},
        "spec": {"selector": {"matchLabels": APP}},
        "status": {
            "disruptionsAllowed": allowed,
            "disruptedPods": dict.fromkeys(disrupted, T0.isoformat()),
        },
    }


def training_shell(pods: int, allowed: int) -> Shell:
    """Two nodes; ``pods`` training pods on n1 under one budget allowing ``allowed``."""
    shell = Shell(nodes={"n1": healthy_status(), "n2": healthy_status()}, policy=policy_object())
    shell.settle()
    for index in range(pods):
        shell.store.put("pod", training_pod(f"trainer-{index}"))
    shell.store.put("pdb", pdb(allowed))
    return shell


def answering(
    shell: Shell, monkeypatch: pytest.MonkeyPatch, answer: Callable[[list[str]], EvictionResult]
) -> list[str]:
    """Make the apiserver answer every eviction with ``answer``; the pods asked for."""
    asked: list[str] = []

    def evict(pods: Any, **_: Any) -> EvictionResult:
        keys = [p.key for p in pods]
        asked.extend(keys)
        return answer(keys)

    monkeypatch.setattr(shell.cluster, "evict", evict)
    return asked


def draining(shell: Shell, rounds: int = 3) -> None:
    shell.fail("n1")
    for _ in range(rounds):
        shell.round("n1")


def test_a_drain_evicts_within_the_budget_and_resumes_when_it_changes() -> None:
    shell = training_shell(3, allowed=1)
    shell.cluster.calls.clear()
    draining(shell, rounds=4)
    assert shell.phase("n1") is Phase.DRAINING
    asked = [k for keys in shell.cluster.writes("evict") for k in keys]
    assert len(asked) == 1  # the budget allows one; the same version is never spent twice
    drain = shell.store.status("n1").drain
    assert drain is not None
    assert drain.blocked_by == "train/llm"
    evicted = asked[0].split("/")[1]
    shell.store.put("pdb", pdb(1))  # a version from before the eviction: still held
    shell.round("n1")
    assert len([k for keys in shell.cluster.writes("evict") for k in keys]) == 1
    shell.store.put("pdb", pdb(0, disrupted=(evicted,)))  # the eviction's own write
    shell.round("n1")
    assert len([k for keys in shell.cluster.writes("evict") for k in keys]) == 1
    leaving = training_pod(evicted)
    leaving["metadata"]["deletionTimestamp"] = T0.isoformat()
    shell.store.put("pod", leaving)
    shell.store.put("pdb", pdb(1))  # the disruption controller's count: room again
    shell.round("n1")
    asked = [k for keys in shell.cluster.writes("evict") for k in keys]
    assert len(asked) == 2
    assert len(set(asked)) == 2


def test_an_eviction_the_apiserver_refused_spends_nothing_of_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A throttled apiserver answers 429 too: the pod must be asked for again, not
    wait for a budget version that will never come."""
    shell = training_shell(1, allowed=1)
    asked = answering(
        shell, monkeypatch, lambda keys: EvictionResult(blocked=dict.fromkeys(keys, "Too many"))
    )
    draining(shell, rounds=4)
    assert asked.count("train/trainer-0") >= 2  # asked again, the budget unchanged


def test_a_drain_says_once_which_budget_it_waits_for_however_often_it_wakes() -> None:
    shell = training_shell(2, allowed=0)
    draining(shell)
    for _ in range(5):  # five changes of budgets elsewhere wake the drain
        shell.store.put("pdb", pdb(0))
        shell.round("n1")
    assert shell.phase("n1") is Phase.DRAINING
    waiting = [(ref.kind, m) for ref, r, m, _ in shell.events.posted if r == "EvictionBlocked"]
    assert len(waiting) == 1  # once, on the Node (a drain's detail: not on the GPUNode)
    assert waiting[0][0] == "Node"
    assert "PodDisruptionBudgets train/llm that allow no disruption now" in waiting[0][1]


def test_evictions_the_api_refuses_are_said_once_per_drain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shell = training_shell(2, allowed=2)
    answering(
        shell, monkeypatch, lambda keys: EvictionResult(blocked=dict.fromkeys(keys, "Too many"))
    )
    draining(shell, rounds=4)
    refused = [(ref.kind, m) for ref, r, m, _ in shell.events.posted if r == "EvictionBlocked"]
    assert len(refused) == 1
    assert refused[0][0] == "Node"
    assert (
        "the API refused 2 evictions (train/trainer-0: Too many; train/trainer-1:"
        in (refused[0][1])
    )
    drain = shell.store.status("n1").drain
    assert drain is not None
    assert "Too many" in drain.blocked_by  # what blocks it now, as it changes


def test_a_drains_progress_is_written_at_most_every_few_seconds_and_never_lost() -> None:
    shell = training_shell(3, allowed=3)
    draining(shell)
    assert shell.phase("n1") is Phase.DRAINING
    terminate_evicted(shell)
    written = len(shell.cluster.writes("apply_gpunode_status"))

    def leaves(name: str) -> None:
        shell.store.put("pod", training_pod(name), deleted=True)
        shell.round("n1")

    leaves("trainer-0")  # progress only: held within PROGRESS_EVERY of the last write
    leaves("trainer-1")
    assert len(shell.cluster.writes("apply_gpunode_status")) == written
    assert shell.requeued[-1][0] == "n1"  # decided again when it may be written
    shell.now += PROGRESS_EVERY
    shell.round("n1")
    assert len(shell.cluster.writes("apply_gpunode_status")) == written + 1
    drain = shell.store.status("n1").drain
    assert drain is not None
    assert (drain.evicted, drain.pending) == (3, ["train/trainer-2"])
    leaves("trainer-2")  # the drain ends: the next phase is written at once
    assert shell.store.status("n1").phase is Phase.REMEDIATING


def test_evictions_are_said_in_one_event_with_the_progress_write() -> None:
    shell = training_shell(3, allowed=1)
    draining(shell)

    def said() -> list[str]:
        return [m for ref, r, m, _ in shell.events.posted if r == "Evicted" and ref.kind == "Node"]

    assert len(said()) == 1  # the drain's first eviction, with its first write
    for _ in range(2):  # each budget change lets one more pod go: progress only
        evicted = terminate_evicted(shell)
        shell.store.put("pdb", pdb(1, disrupted=tuple(evicted)))
        shell.round("n1")
    terminate_evicted(shell)
    assert len(said()) == 1
    shell.now += PROGRESS_EVERY
    shell.round("n1")
    assert len(said()) == 2
    assert said()[1].startswith("evicted 2 pods: train/trainer-")
    assert shell.events.reasons("GPUNode") == []  # every Event is on the Node, once
    assert "Xid" in shell.events.reasons("Node")


def test_held_progress_is_written_when_due_even_if_the_drain_changes_no_more() -> None:
    shell = training_shell(2, allowed=2)
    draining(shell)
    written = len(shell.cluster.writes("apply_gpunode_status"))
    shell.store.put("pod", training_pod("trainer-0"), deleted=True)
    terminating = training_pod("trainer-1")  # and then nothing: it takes its time
    terminating["metadata"]["deletionTimestamp"] = T0.isoformat()
    shell.store.put("pod", terminating)
    shell.round("n1")
    assert len(shell.cluster.writes("apply_gpunode_status")) == written  # held
    shell.now += PROGRESS_EVERY
    shell.round("n1")
    assert len(shell.cluster.writes("apply_gpunode_status")) == written + 1
    drain = shell.store.status("n1").drain
    assert drain is not None
    assert drain.pending == ["train/trainer-1"]


def test_an_eviction_with_no_answer_holds_its_room_until_the_hold_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A timeout may hide an eviction the apiserver made: asking for the budget's room
    again at once could take a second pod the budget does not allow."""
    shell = training_shell(2, allowed=1)
    asked = answering(
        shell,
        monkeypatch,
        lambda keys: EvictionResult(failed=dict.fromkeys(keys, "ReadTimeoutError: timed out")),
    )
    draining(shell, rounds=4)
    assert len(asked) == 1
    shell.now += HELD_FOR
    shell.round("n1")
    assert len(asked) == 2


def test_a_node_deleted_mid_drain_leaves_no_held_progress_behind() -> None:
    shell = training_shell(2, allowed=2)
    draining(shell)
    shell.store.put("pod", training_pod("trainer-0"), deleted=True)
    shell.round("n1")
    assert shell.executor.owes_progress("n1", shell.now + PROGRESS_EVERY)
    shell.rounds.observe("node", shell.store.nodes["n1"], deleted=True)
    assert not shell.executor.owes_progress("n1", shell.now + PROGRESS_EVERY)


def test_a_budget_change_wakes_only_the_drains_that_wait_for_it() -> None:
    shell = Shell(
        nodes={"n1": healthy_status(), "n2": healthy_status(), "n3": healthy_status()},
        policy=policy_object(),
    )
    shell.settle()
    for name in ("trainer-0", "trainer-1"):
        shell.store.put("pod", training_pod(name))  # on n1, under train/llm
    other = training_pod("server-0")
    other["metadata"]["labels"] = {"app": "web"}
    other["spec"] = {"nodeName": "n2"}
    shell.store.put("pod", other)
    shell.store.put("pdb", pdb(0))
    shell.fail("n1")
    shell.fail("n2")
    for _ in range(3):
        shell.round("n1", "n2")
    assert shell.phase("n1") is Phase.DRAINING
    assert shell.executor.waiting_for("train/llm") == ["n1"]
    shell.rounds.dirty.clear()
    shell.rounds.observe("pdb", pdb(1))
    assert shell.rounds.dirty == {"n1"}
    shell.round("n1")
    assert shell.executor.waiting_for("train/llm") == ["n1"]  # one of two went
    shell.rounds.observe("pdb", pdb(2, disrupted=("trainer-0", "trainer-1")))
    shell.round("n1")
    assert shell.executor.waiting_for("train/llm") == []


def test_many_drains_write_their_progress_less_often_each() -> None:
    assert progress_every(1) == progress_every(300) == PROGRESS_EVERY
    assert progress_every(750).total_seconds() == 75  # ten writes a second for all


def budget_object(name: str, labels: dict[str, str], **status: object) -> dict[str, object]:
    return {
        "metadata": {"namespace": "train", "name": name, "resourceVersion": version()},
        "spec": {"selector": {"matchLabels": labels}},
        "status": status,
    }


def test_crash_looping_and_pending_pods_go_although_their_budget_allows_nothing() -> None:
    """As the eviction API lets them go, and ``kubectl drain`` finds: the budget keeps
    two healthy of two pods and has one; the unready one disrupts nothing."""
    shell = training_shell(0, allowed=0)
    crashing = training_pod("crashing")
    crashing["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    pending = training_pod("pending")
    pending["status"] = {"phase": "Pending"}
    for pod in (crashing, pending):
        shell.store.put("pod", pod)
    shell.store.put(
        "pdb",
        budget_object(
            "llm",
            APP,
            disruptionsAllowed=0,
            currentHealthy=1,
            desiredHealthy=2,
            expectedPods=2,
            observedGeneration=1,
        )
        | {"spec": {"selector": {"matchLabels": APP}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}},
    )
    draining(shell, rounds=3)
    asked = {k for keys in shell.cluster.writes("evict") for k in keys}
    assert asked == {"train/crashing", "train/pending"}
    assert not [r for _, r, _, _ in shell.events.posted if r == "EvictionBlocked"]


def test_a_pod_under_two_budgets_is_not_asked_for_and_the_drain_says_why_once() -> None:
    shell = training_shell(1, allowed=0)
    shell.store.put("pdb", pdb(5))
    shell.store.put("pdb", budget_object("everything", {}, disruptionsAllowed=5))
    draining(shell, rounds=4)
    assert shell.phase("n1") is Phase.DRAINING
    assert [k for keys in shell.cluster.writes("evict") for k in keys] == []
    said = [(ref.kind, m) for ref, r, m, _ in shell.events.posted if r == "EvictionImpossible"]
    assert [kind for kind, _ in said] == ["Node"]  # once
    assert "train/trainer-0: train/everything, train/llm" in said[0][1]
    assert "after 30m the drain's onTimeout (escalate) applies" in said[0][1]
    drain = shell.store.status("n1").drain
    assert drain is not None
    assert drain.blocked_by == "train/everything + train/llm (one pod, several budgets)"
    assert shell.executor.waiting_for("train/everything") == ["n1"]
    shell.rounds.dirty.clear()
    shell.rounds.observe("pdb", budget_object("everything", {}), deleted=True)
    assert shell.rounds.dirty == {"n1"}  # one budget gone: the pod may go now
    shell.round("n1")
    assert [k for keys in shell.cluster.writes("evict") for k in keys] == ["train/trainer-0"]


def test_a_budget_that_keeps_every_pod_is_said_to_hold_the_drain_until_it_changes() -> None:
    shell = training_shell(1, allowed=0)
    shell.store.put(
        "pdb",
        budget_object(
            "llm", APP, disruptionsAllowed=0, currentHealthy=1, desiredHealthy=1, expectedPods=1
        ),
    )
    draining(shell, rounds=3)
    said = [m for _, r, m, _ in shell.events.posted if r == "EvictionImpossible"]
    assert said
    assert said[0].startswith("PodDisruptionBudgets train/llm keep every pod they expect")
