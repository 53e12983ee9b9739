"""The operator's shell of the hang rule: the accountant's tick judges each job Pitcrew
discovered, blames a node once per stall and restarts exactly the pods it judged."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from prometheus_client import REGISTRY

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import HEARTBEAT_ANNOTATION, JOB_LABEL
from pitcrew.client.progress import encode_heartbeat
from pitcrew.controller.accountant import Accountant
from pitcrew.controller.hangs import HangWatch, Restart, Restarter
from pitcrew.controller.store import Store
from pitcrew.core.hangs import Heartbeat
from support.lifecycle_data import T0
from support.shell_fakes import gpunode, healthy_status, node_object, policy_object, version

NODES = ("hang-a", "hang-b", "hang-c")


def pod(name: str, node: str, *, namespace: str = "train", job: str = "llm") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": version(),
            "labels": {JOB_LABEL: job},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Running"},
    }


def beat(store: Store, key: str, rank: int, step: int, second: float) -> None:
    """The pod's first rank writes its heartbeat: ``step`` at ``T0 + second``."""
    updated = copy.deepcopy(store.pods[key])
    updated["metadata"]["resourceVersion"] = version()
    heartbeat = Heartbeat(
        rank=rank, step=step, time=T0 + datetime.timedelta(seconds=second), step_seconds=1.0
    )
    updated["metadata"]["annotations"] = {HEARTBEAT_ANNOTATION: encode_heartbeat(heartbeat)}
    store.put("pod", updated)


def fleet(**policy: Any) -> Store:
    store = Store()
    store.put("policy", policy_object(**policy))
    for name in NODES:
        store.put("node", node_object(name))
        store.put("gpunode", gpunode(name, healthy_status()))
    store.put("pod", pod("llm-0", "hang-a"))
    store.put("pod", pod("llm-1", "hang-b"))
    # Another namespace's job of the same name, on the third node: never touched.
    store.put("pod", pod("llm-0", "hang-c", namespace="tenant-b"))
    return store


def hangs_of(reason: str) -> float:
    return REGISTRY.get_sample_value("pitcrew_job_hangs_total", {"reason": reason}) or 0.0


def watched(store: Store) -> tuple[Accountant, list[Restart], list[list[str]]]:
    restarts: list[Restart] = []
    woken: list[list[str]] = []
    watch = HangWatch(store, restart=restarts.append)
    accountant = Accountant(store, now=T0, hangs=watch, wake=lambda n: woken.append(list(n)))
    return accountant, restarts, woken


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def test_the_rank_that_stopped_first_has_its_node_blamed_and_the_job_restarted_once() -> None:
    store = fleet()
    accountant, restarts, woken = watched(store)
    beat(store, "train/llm-0", 0, 100, 10)
    beat(store, "train/llm-1", 8, 97, 7)  # stopped first
    beat(store, "tenant-b/llm-0", 0, 160, 70)  # still stepping
    before = hangs_of("StoppedFirst")
    accountant.tick(at(69))
    assert restarts == []
    assert store.hangs == {}
    accountant.tick(at(71))
    assert list(store.hangs) == ["hang-b"]
    assert "rank 8 (pod train/llm-1) stopped first, at step 97" in store.hangs["hang-b"]
    assert woken == [["hang-b"]]
    [restart] = restarts
    assert restart.job == "train/llm"
    assert restart.pods == (
        ("train", "llm-0", "uid-train-llm-0"),
        ("train", "llm-1", "uid-train-llm-1"),
    )
    assert not restart.dry_run
    assert hangs_of("StoppedFirst") == before + 1
    accountant.tick(at(80))  # the same stall: acted on already
    assert len(restarts) == 1


def test_the_verdict_goes_once_the_node_is_out_of_service() -> None:
    store = fleet()
    accountant, _, woken = watched(store)
    beat(store, "train/llm-0", 0, 100, 10)
    beat(store, "train/llm-1", 8, 97, 7)
    accountant.tick(at(71))
    assert list(store.hangs) == ["hang-b"]
    out = healthy_status().model_copy(update={"phase": Phase.QUARANTINED, "reason": "Hang"})
    store.put("gpunode", gpunode("hang-b", out))
    accountant.tick(at(75))
    assert store.hangs == {}
    assert woken[-1] == ["hang-b"]


def test_a_policy_dry_run_restarts_nothing_and_says_what_it_would() -> None:
    store = fleet(safety={"dryRun": True})
    accountant, restarts, _ = watched(store)
    beat(store, "train/llm-0", 0, 100, 10)
    beat(store, "train/llm-1", 8, 100, 10)
    accountant.tick(at(71))
    [restart] = restarts
    assert restart.dry_run
    assert store.hangs == {}  # nobody blamed: all stopped at once


def test_a_paused_policy_judges_no_job() -> None:
    store = fleet(safety={"paused": True})
    accountant, restarts, _ = watched(store)
    beat(store, "train/llm-0", 0, 100, 10)
    beat(store, "train/llm-1", 8, 97, 7)
    accountant.tick(at(600))
    assert restarts == []
    assert store.hangs == {}


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def __call__(self, ref: Any, *, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((ref.name, ref.uid, reason))


class Inline:
    """An executor that runs what it is given at once."""

    def submit(self, fn: Any, *args: Any) -> None:
        fn(*args)


def test_the_restarter_deletes_the_pods_by_uid_and_says_so_on_each() -> None:
    deleted: list[tuple[str, str, str]] = []

    def delete(pods: Any) -> list[str]:
        pods = list(pods)
        deleted.extend(pods)
        return [f"{ns}/{name}" for ns, name, _ in pods[:1]]  # the second was replaced meanwhile

    events = Recorded()
    restarter = Restarter(delete=delete, emit=events, pool=Inline())  # type: ignore[arg-type]
    pods = (("train", "llm-0", "u0"), ("train", "llm-1", "u1"))
    restarter(Restart(job="train/llm", pods=pods, message="hung", dry_run=False))
    assert deleted == list(pods)
    assert events.events == [("llm-0", "u0", "HangRestart")]
    restarter(Restart(job="train/llm", pods=pods, message="hung", dry_run=True))
    assert deleted == list(pods)  # nothing more deleted
    assert events.events[1:] == [("llm-0", "u0", "HangDetected"), ("llm-1", "u1", "HangDetected")]
