"""The operator's round loop and executor with its Slurm watch on a stand-in for
Slurm's tools: what a decision sees of Slurm when Slurm cannot be read, when the
operator has no Slurm client, when a node leaves its policy or is replaced."""

from __future__ import annotations

import contextlib
import copy
import datetime
from typing import Any

from pitcrew.api.gpunode import Phase
from pitcrew.controller.slurm import SlurmWatch
from pitcrew.core.views import SlurmNodeView
from pitcrew.slurm.control import SlurmError
from support.shell_fakes import (
    Shell,
    healthy_status,
    policy_object,
    version,
)
from support.slurm_fakes import FakeSlurm

SLURM_POLICY = {"slurm": {"enabled": True}, "safety": {"maxUnhealthy": "100%"}}
LABEL = "slinky.slurm.net/pod-hostname"


def slurmd_pod(node: str, slurm_name: str) -> dict[str, Any]:
    """A slurmd pod as Slinky's NodeSet makes it: in the Slurm namespace, on the node,
    naming its Slurm node by label."""
    return {
        "metadata": {
            "namespace": "slurm",
            "name": f"slurmd-{node}",
            "uid": f"uid-slurmd-{node}",
            "resourceVersion": version(),
            "labels": {LABEL: slurm_name},
            "ownerReferences": [{"kind": "NodeSet", "name": "compute", "controller": True}],
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def shell_with(slurm: FakeSlurm | None, *nodes: str) -> tuple[Shell, SlurmWatch | None]:
    watch = None
    if slurm is not None:
        watch = SlurmWatch(slurm, interval=10, wake=lambda _: None, clock=lambda: slurm.clock[0])  # type: ignore[arg-type]
        watch.poll()
    shell = Shell(
        nodes=dict.fromkeys(nodes, healthy_status()),
        policy=policy_object(**SLURM_POLICY),
        slurm=watch,
    )
    return shell, watch


def settle(shell: Shell, watch: SlurmWatch | None) -> None:
    """Rounds until nothing changes, Slurm read before each (as the watch's poll,
    poked by each ``scontrol update``, would)."""
    for _ in range(8):
        if watch is not None:
            with contextlib.suppress(SlurmError):  # as the watch's thread goes on
                watch.poll()
        if not shell.round():
            break


def pass_time(shell: Shell, slurm: FakeSlurm | None, seconds: float) -> None:
    shell.now += datetime.timedelta(seconds=seconds)
    if slurm is not None:
        slurm.clock[0] += seconds


def evicted(shell: Shell) -> list[str]:
    return [
        key
        for kind, keys in shell.cluster.calls
        if kind in ("evict", "force_delete")
        for key in keys
    ]


def test_a_drain_waits_while_slurm_does_not_answer() -> None:
    """slurmctld restarting mid-drain: the last read goes stale. The drain must not take
    that for "no Slurm node here" and start the reset while Slurm's job runs on."""
    slurm = FakeSlurm({"n1": SlurmNodeView("n1", ("ALLOCATED",))})
    shell, watch = shell_with(slurm, "n1")
    assert watch is not None
    settle(shell, watch)
    shell.fail("n1")
    settle(shell, watch)
    assert shell.phase("n1") is Phase.DRAINING
    assert [(n, s) for n, s, _ in slurm.updates] == [("n1", "DRAIN")]
    watch.poll()
    slurm.down = True
    pass_time(shell, slurm, 10 * 60)  # slurmctld out for ten minutes
    settle(shell, watch)
    assert shell.phase("n1") is Phase.DRAINING
    assert shell.store.status("n1").drain is not None
    assert shell.store.status("n1").drain.pending == ["slurm/n1 (not readable)"]
    assert not shell.remediator.requests
    assert "SlurmUnreadable" in shell.events.reasons()


def test_without_a_slurm_client_the_slurmd_pod_stays_and_the_node_says_why() -> None:
    """A Slurm policy on an operator started without --slurm-scontrol: the slurmd pod is
    not evicted (that kills Slurm's jobs unseen), and status and an Event say why."""
    shell, watch = shell_with(None, "n1")
    shell.store.put("pod", slurmd_pod("n1", "compute-1"))
    settle(shell, watch)
    shell.fail("n1")
    settle(shell, watch)
    assert shell.phase("n1") is Phase.DRAINING
    assert evicted(shell) == []
    status = shell.store.status("n1")
    assert status.drain is not None
    assert status.drain.pending == ["slurm/compute-1 (not readable)"]
    (condition,) = [c for c in status.conditions if c.type == "SlurmReadable"]
    assert condition.reason == "SlurmUnreadable"
    assert "--slurm-scontrol" in condition.message
    assert "SlurmUnreadable" in shell.events.reasons()


def test_a_node_no_policy_manages_any_more_loses_pitcrews_slurm_drain() -> None:
    slurm = FakeSlurm({"n1": SlurmNodeView("n1", ("IDLE",))})
    shell, watch = shell_with(slurm, "n1")
    assert watch is not None
    settle(shell, watch)
    shell.fail("n1")
    settle(shell, watch)
    assert [s for _, s, _ in slurm.updates] == ["DRAIN"]
    watch.poll()
    shell.round("n1")
    relabelled = copy.deepcopy(shell.store.nodes["n1"])
    relabelled["metadata"]["labels"] = {"pool": "elsewhere"}
    relabelled["metadata"]["resourceVersion"] = version()
    shell.store.put("node", relabelled)
    shell.round("n1")
    assert [s for _, s, _ in slurm.updates] == ["DRAIN", "RESUME"]
    watch.poll()
    shell.round("n1")
    assert [s for _, s, _ in slurm.updates] == ["DRAIN", "RESUME"]  # once


def test_the_node_that_replaces_a_deleted_one_gets_its_slurm_node() -> None:
    """The machine behind gpu-a was replaced: gpu-a deleted, gpu-b joined, the slurmd pod
    rescheduled there naming the same Slurm node. gpu-a's claim must not outlive it."""
    slurm = FakeSlurm({"compute-1": SlurmNodeView("compute-1", ("IDLE",))})
    shell, watch = shell_with(slurm, "gpu-a", "gpu-b")
    shell.store.put("pod", slurmd_pod("gpu-a", "compute-1"))
    settle(shell, watch)
    assert shell.store.status("gpu-a").slurm is not None
    shell.rounds.observe("pod", slurmd_pod("gpu-a", "compute-1"), deleted=True)
    shell.rounds.observe("node", shell.store.nodes["gpu-a"], deleted=True)
    shell.rounds.observe("pod", slurmd_pod("gpu-b", "compute-1"))
    settle(shell, watch)
    status = shell.store.status("gpu-b")
    assert status.slurm is not None
    assert status.slurm.node == "compute-1"
    readable = [c for c in status.conditions if c.type == "SlurmReadable"]
    assert [c.reason for c in readable] == ["Read"]
