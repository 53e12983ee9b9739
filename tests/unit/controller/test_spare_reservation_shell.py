"""The operator's shell serves a reserved spare: the job's waiting pods wake it, get the
toleration, and their landing ends the reservation (with fakes for the API)."""

from __future__ import annotations

from typing import Any

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import RESERVED_TAINT
from support.shell_fakes import Shell, healthy_status, policy_object, version

JOB = "train.llm"
JOBSET = "jobset.sigs.k8s.io/jobset-name"
"""The label a JobSet's pods carry: the job is found without any label of Pitcrew's."""


def pod_object(
    name: str, *, node: str = "", labels: dict[str, str] | None = None, gpus: int = 8
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "train",
            "uid": f"uid-{name}",
            "resourceVersion": version(),
            "labels": {JOBSET: "llm"} if labels is None else labels,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def taints(shell: Shell, node: str) -> dict[str, str]:
    spec = shell.store.nodes[node].get("spec") or {}
    return {t["key"]: t.get("value", "") for t in spec.get("taints") or []}


def test_the_jobs_waiting_pod_wakes_its_reserved_spare_is_tolerated_and_lands() -> None:
    shell = Shell(
        nodes={n: healthy_status() for n in ("n0", "n1", "n2")},
        policy=policy_object(spares={"count": 1}, safety={"maxUnhealthy": 2}),
    )
    shell.rounds.observe("pod", pod_object("trainer-1", node="n1"))
    shell.rounds.observe("pod", pod_object("trainer-2", node="n2"))
    shell.settle()
    assert shell.phase("n0") is Phase.SPARE  # the idle node

    shell.fail("n1")
    shell.round("n1")
    assert shell.phase("n1") is Phase.QUARANTINED
    assert taints(shell, "n0") == {RESERVED_TAINT: JOB}  # the spare taint swapped for it
    shell.round("n0")
    assert shell.phase("n0") is Phase.HEALTHY
    assert shell.store.status("n0").reason == "SpareReserved"

    shell.rounds.dirty.clear()
    shell.rounds.observe("pod", pod_object("web-0", labels={}))  # waits too: no job's
    assert shell.rounds.dirty == set()
    shell.rounds.observe("pod", pod_object("trainer-1-b"))  # the job's replacement
    assert shell.rounds.dirty == {"n0"}
    shell.round("n0")
    assert shell.cluster.writes("tolerate") == [(["train/trainer-1-b"], RESERVED_TAINT, JOB)]
    reservation = shell.store.status("n0").reservation
    assert reservation is not None
    assert reservation.waiting_since == shell.now

    shell.rounds.observe("pod", pod_object("trainer-1-b", node="n0"))
    assert "n0" in shell.rounds.dirty
    shell.round("n0")
    assert taints(shell, "n0") == {}
    assert shell.store.status("n0").reason == "SpareClaimed"
    assert "reservation" not in shell.cluster.gpunode_statuses["n0"][-1]


def test_a_pod_that_is_bound_or_gone_leaves_the_waiting_pods() -> None:
    shell = Shell(nodes={"n0": healthy_status()}, policy=policy_object())
    shell.rounds.observe("pod", pod_object("trainer-1"))
    assert list(shell.store.unscheduled) == ["train/trainer-1"]
    shell.rounds.observe("pod", pod_object("trainer-1", node="n0"))
    assert shell.store.unscheduled == {}
    shell.rounds.observe("pod", pod_object("trainer-2"))
    shell.rounds.observe("pod", pod_object("trainer-2"), deleted=True)
    assert shell.store.unscheduled == {}


def unschedulable(pod: dict[str, Any], *, owned: bool = True) -> dict[str, Any]:
    """``pod`` as the scheduler leaves one it found no node for; ``owned``: made by a Job."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    pod["status"]["conditions"] = [condition]
    if owned:
        owner = {"kind": "Job", "name": "llm-workers-0", "uid": "u", "controller": True}
        pod["metadata"]["ownerReferences"] = [owner]
    return pod


def test_a_training_pod_waiting_for_capacity_wakes_the_spares_and_one_is_lent() -> None:
    shell = Shell(
        nodes={n: healthy_status() for n in ("n0", "n1", "n2")},
        policy=policy_object(spares={"count": 2, "keepForDisplaced": 1}),
    )
    shell.rounds.observe("pod", pod_object("trainer-0", node="n2"))
    shell.settle()
    assert (shell.phase("n0"), shell.phase("n1")) == (Phase.SPARE, Phase.SPARE)

    shell.rounds.dirty.clear()
    shell.rounds.observe("pod", unschedulable(pod_object("web-0", labels={}, gpus=0)))
    bare = pod_object("bare-0", labels={JOBSET: "bare"})
    shell.rounds.observe("pod", unschedulable(bare, owned=False))
    shell.rounds.observe("pod", pod_object("trainer-1"))  # not tried by the scheduler yet
    assert shell.rounds.dirty == set()
    assert shell.store.capacity_waiting == {}

    shell.rounds.observe("pod", unschedulable(pod_object("trainer-1")))
    assert shell.rounds.dirty == {"n0", "n1"}
    shell.round("n0")
    shell.round("n1")
    assert shell.phase("n0") is Phase.SPARE  # kept for the job that loses a node next
    assert taints(shell, "n1") == {RESERVED_TAINT: JOB}
    assert shell.store.status("n1").reason == "SpareLent"
    shell.round("n1")
    assert shell.cluster.writes("tolerate") == [(["train/trainer-1"], RESERVED_TAINT, JOB)]
