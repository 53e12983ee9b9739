"""The accountant's gauges follow the fleet: a deleted node's heartbeat goes."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pitcrew.api.gpunode import Phase, Transition
from pitcrew.api.meta import Duration
from pitcrew.api.vocabulary import JOB_LABEL, JOB_SIZE_LABEL, PROGRESS_ANNOTATION
from pitcrew.client.progress import encode
from pitcrew.controller.accountant import Accountant
from pitcrew.controller.store import Store
from pitcrew.core.convert import EPOCH
from pitcrew.core.job_ledger import Progress, RankTime
from pitcrew.core.job_size import Owner
from support.lifecycle_data import T0
from support.shell_fakes import gpunode, healthy_status, node_object, policy_object, version

HEARTBEAT = "pitcrew_agent_last_heartbeat_timestamp_seconds"


def heartbeat_of(node: str) -> float | None:
    return REGISTRY.get_sample_value(HEARTBEAT, {"node": node})


def test_a_deleted_nodes_heartbeat_series_is_removed() -> None:
    store = Store()
    store.put("policy", policy_object())
    for name in ("acct-a", "acct-b"):
        store.put("node", node_object(name))
        store.put("gpunode", gpunode(name, healthy_status()))
    accountant = Accountant(store, now=T0)
    accountant.tick(T0)
    assert heartbeat_of("acct-a") == T0.timestamp()
    store.put("node", store.nodes["acct-b"], deleted=True)
    store.put("gpunode", store.gpunodes["acct-b"], deleted=True)
    accountant.tick(T0)
    assert heartbeat_of("acct-b") is None  # the alert on it cannot fire for ever
    assert heartbeat_of("acct-a") == T0.timestamp()


def info_of(node: str) -> list[dict[str, str]]:
    """The labels of every ``pitcrew_gpunode_info`` series of ``node``."""
    return [
        sample.labels
        for metric in REGISTRY.collect()
        if metric.name == "pitcrew_gpunode_info"
        for sample in metric.samples
        if sample.labels["node"] == node and sample.value == 1
    ]


def test_each_node_has_one_info_series_naming_its_phase_and_reason() -> None:
    store = Store()
    store.put("policy", policy_object())
    store.put("node", node_object("acct-i"))
    store.put("gpunode", gpunode("acct-i", healthy_status()))
    accountant = Accountant(store, now=T0)
    accountant.tick(T0)
    assert info_of("acct-i") == [
        {"node": "acct-i", "pool": "fleet", "phase": "Healthy", "reason": ""}
    ]
    out = healthy_status().model_copy(update={"phase": Phase.QUARANTINED, "reason": "Xid"})
    store.put("gpunode", gpunode("acct-i", out))
    accountant.tick(T0 + datetime.timedelta(seconds=5))
    # Replaced, not added to: the Healthy series is gone.
    assert info_of("acct-i") == [
        {"node": "acct-i", "pool": "fleet", "phase": "Quarantined", "reason": "Xid"}
    ]
    store.put("node", store.nodes["acct-i"], deleted=True)
    store.put("gpunode", store.gpunodes["acct-i"], deleted=True)
    accountant.tick(T0 + datetime.timedelta(seconds=10))
    assert info_of("acct-i") == []


def test_goodput_is_answered_for_each_window_from_phase_time() -> None:
    store = Store()
    store.put("policy", policy_object())
    store.put("node", node_object("acct-c"))
    store.put("gpunode", gpunode("acct-c", healthy_status()))
    accountant = Accountant(store, now=T0)
    for minute in range(1, 31):
        accountant.tick(T0 + datetime.timedelta(minutes=minute))
    out = healthy_status().model_copy(update={"phase": Phase.QUARANTINED})
    store.put("gpunode", gpunode("acct-c", out))
    for minute in range(31, 41):
        accountant.tick(T0 + datetime.timedelta(minutes=minute))
    now = T0 + datetime.timedelta(minutes=40)
    windows = [Duration("5m"), Duration("1h")]
    assert accountant.goodput("fleet", windows, now) == [
        {"window": "5m", "ratio": 0.0},  # quarantined for the last ten minutes
        {"window": "1h", "ratio": 0.75},  # in service 30 of the 40 minutes
    ]
    assert accountant.goodput("nobody", windows, now) == [{"window": "5m"}, {"window": "1h"}]


def job_seconds(job: str, category: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "pitcrew_job_seconds_total", {"training_job": job, "category": category}
        )
        or 0.0
    )


def training_pod(name: str, node: str, uid: str, started: datetime.datetime) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "train",
            "uid": uid,
            "resourceVersion": version(),
            "labels": {JOB_LABEL: "acct-llm", JOB_SIZE_LABEL: "2"},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "t",
                    "restartCount": 0,
                    "state": {"running": {"startedAt": started.isoformat()}},
                }
            ],
        },
    }


def test_a_pod_evicted_and_replaced_between_two_ticks_is_placed_at_its_deletion() -> None:
    store = Store()
    store.put("policy", policy_object())
    for name in ("acct-d", "acct-e", "acct-f"):
        store.put("node", node_object(name))
        store.put("gpunode", gpunode(name, healthy_status()))
    job = "train/acct-llm"
    accountant = Accountant(store, now=T0)
    for rank, node in enumerate(("acct-d", "acct-e")):
        store.put("pod", training_pod(f"r{rank}", node, f"u{rank}", T0))
    accountant.tick(T0)
    accountant.tick(T0 + datetime.timedelta(seconds=5))
    before = {c: job_seconds(job, c) for c in ("productive", "wasted", "recovery", "waiting")}
    # The API writes whole seconds: evicted within second 6 (the deletion timestamp
    # "7" is the request plus its 1 s grace), the replacement running within second 7;
    # the ledger takes the middle of each second (6.5 s and 7.5 s). The next tick is at
    # 10 s.
    evicted = training_pod("r1", "acct-e", "u1", T0)
    evicted["metadata"]["deletionTimestamp"] = (T0 + datetime.timedelta(seconds=7)).isoformat()
    evicted["metadata"]["deletionGracePeriodSeconds"] = 1
    store.put("pod", evicted, deleted=True)
    store.put("pod", training_pod("r1", "acct-f", "u9", T0 + datetime.timedelta(seconds=7)))
    taken_out = healthy_status().model_copy(update={"phase": Phase.QUARANTINED})
    store.put("gpunode", gpunode("acct-e", taken_out))
    accountant.tick(T0 + datetime.timedelta(seconds=10))
    added = {c: job_seconds(job, c) - before[c] for c in before}
    # No checkpoints reported: the running time (5-6.5 s, 7.5-10 s) is productive, the
    # second between the eviction and the replacement running is recovery.
    assert added == pytest.approx(
        {"productive": 4.0, "wasted": 0.0, "recovery": 1.0, "waiting": 0.0}
    )
    interruptions = REGISTRY.get_sample_value(
        "pitcrew_job_interruptions_total", {"training_job": job, "cause": "node-fault"}
    )
    assert interruptions == 1
    # Counted for the pool of the job's nodes too (mean time between interruptions).
    pool = REGISTRY.get_sample_value(
        "pitcrew_pool_interruptions_total", {"pool": "fleet", "cause": "node-fault"}
    )
    assert pool == 1


def test_a_quarantine_shorter_than_a_tick_shows_in_gpu_seconds() -> None:
    store = Store()
    store.put("policy", policy_object())
    store.put("node", node_object("acct-g"))
    store.put("gpunode", gpunode("acct-g", healthy_status()))
    accountant = Accountant(store, now=T0)
    accountant.tick(T0)
    quarantined = (
        REGISTRY.get_sample_value(
            "pitcrew_gpu_seconds_total", {"pool": "fleet", "phase": "Quarantined"}
        )
        or 0.0
    )
    history = [
        Transition(time=T0 + datetime.timedelta(seconds=s), from_phase=a, to_phase=b, reason="test")
        for s, a, b in (
            (1.0, Phase.HEALTHY, Phase.QUARANTINED),
            (1.3, Phase.QUARANTINED, Phase.HEALTHY),
        )
    ]
    store.put(
        "gpunode", gpunode("acct-g", healthy_status().model_copy(update={"history": history}))
    )
    accountant.tick(T0 + datetime.timedelta(seconds=5))
    after = REGISTRY.get_sample_value(
        "pitcrew_gpu_seconds_total", {"pool": "fleet", "phase": "Quarantined"}
    )
    assert after == pytest.approx(quarantined + 0.3 * 8)


def test_ten_thousand_job_labels_leave_the_metrics_bounded() -> None:
    # Anyone who may create pods can label them with a new job name each.
    store = Store()
    store.put("policy", policy_object())
    store.put("node", node_object("acct-g"))
    store.put("gpunode", gpunode("acct-g", healthy_status()))
    big = training_pod("big-0", "acct-g", "big-0", T0)
    big["metadata"]["labels"] = {JOB_LABEL: "acct-big"}
    store.put("pod", big)
    for i in range(10_000):
        pod = training_pod(f"spam-{i}", "acct-g", f"spam-{i}", T0)
        pod["metadata"]["labels"] = {JOB_LABEL: f"acct-spam-{i}"}
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
        store.put("pod", pod)
    web = training_pod("web-0", "acct-g", "web-0", T0)
    web["metadata"]["labels"] = {JOB_LABEL: "acct-web"}
    web["spec"]["containers"][0]["resources"] = {}
    store.put("pod", web)
    accountant = Accountant(store, now=T0, max_jobs=20)
    accountant.tick(T0 + datetime.timedelta(seconds=5))
    jobs = {
        sample.labels["training_job"]
        for metric in REGISTRY.collect()
        if metric.name == "pitcrew_job_seconds"
        for sample in metric.samples
        if sample.labels["training_job"].startswith(("train/acct-spam", "train/acct-big", "other"))
    }
    assert len(jobs) <= 21
    assert "train/acct-big" in jobs  # the largest job keeps its name
    assert "other" in jobs
    assert REGISTRY.get_sample_value("pitcrew_jobs_folded") == 10_001 - 20
    assert REGISTRY.get_sample_value("pitcrew_job_gpus", {"training_job": "other"}) == 10_001 - 20
    assert job_seconds("train/acct-web", "productive") == 0.0  # requests no GPU: no job


def test_a_malformed_progress_annotation_is_ignored_and_flagged_once_per_value() -> None:
    store = Store()
    store.put("policy", policy_object())
    store.put("node", node_object("acct-h"))
    store.put("gpunode", gpunode("acct-h", healthy_status()))
    flagged: list[tuple[str, str]] = []
    accountant = Accountant(
        store,
        now=T0,
        flag=lambda pod, *, reason, message: flagged.append((pod["metadata"]["name"], reason)),
    )
    pod = training_pod("bad-0", "acct-h", "bad-0", T0)
    pod["metadata"]["labels"] = {JOB_LABEL: "acct-bad", JOB_SIZE_LABEL: "1"}
    pod["metadata"]["annotations"] = {PROGRESS_ANNOTATION: "{" * 10_000}
    store.put("pod", pod)
    for second in (5, 10, 15):
        accountant.tick(T0 + datetime.timedelta(seconds=second))
    assert flagged == [("bad-0", "MalformedProgress")]
    pod = {**pod, "metadata": {**pod["metadata"], "resourceVersion": version()}}
    pod["metadata"]["annotations"] = {PROGRESS_ANNOTATION: '{"step": "x"}'}
    store.put("pod", pod)
    accountant.tick(T0 + datetime.timedelta(seconds=20))
    assert len(flagged) == 2
    # The job is still accounted, as one that reports no progress.
    assert job_seconds("train/acct-bad", "productive") > 0


def test_a_jobset_is_accounted_by_its_own_name_without_pitcrews_labels() -> None:
    """A JobSet's pods as its controller creates them (no pitcrew.dev/* label): they
    are one job, named after the JobSet, not one job per child Job; a worker lost
    is the JobSet's interruption."""
    store = Store()
    store.put("policy", policy_object())
    for name in ("acct-j0", "acct-j1"):
        store.put("node", node_object(name))
        store.put("gpunode", gpunode(name, healthy_status()))
    pods = []
    for rank, node in enumerate(("acct-j0", "acct-j1")):
        created = training_pod(f"js-workers-{rank}", node, f"js{rank}", T0)
        created["metadata"]["labels"] = {
            "jobset.sigs.k8s.io/jobset-name": "acct-js",
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": str(rank),
            "batch.kubernetes.io/job-name": f"acct-js-workers-{rank}",
            "job-name": f"acct-js-workers-{rank}",
        }
        pods.append(created)
        store.put("pod", created)
    accountant = Accountant(store, now=T0)
    accountant.tick(T0)
    accountant.tick(T0 + datetime.timedelta(seconds=5))
    assert job_seconds("train/acct-js", "productive") == pytest.approx(5.0)
    assert job_seconds("train/acct-js-workers-0", "productive") == 0.0
    lost = copy.deepcopy(pods[1])
    lost["metadata"]["deletionTimestamp"] = (T0 + datetime.timedelta(seconds=7)).isoformat()
    store.put("pod", lost, deleted=True)
    accountant.tick(T0 + datetime.timedelta(seconds=10))
    interruptions = REGISTRY.get_sample_value(
        "pitcrew_job_interruptions_total", {"training_job": "train/acct-js", "cause": "other"}
    )
    assert interruptions == 1


def test_a_jobsets_declared_size_makes_two_of_four_workers_a_wait() -> None:
    """The JobSet declares 4 workers (read from the object, not a pod label): with two
    pods up the job is waiting for the rest, not training."""
    store = Store()
    store.put("policy", policy_object())
    store.put("node", node_object("acct-size0"))
    store.put("gpunode", gpunode("acct-size0", healthy_status()))
    asked: list[Owner] = []

    def sizes(owner: Owner) -> int | None:
        asked.append(owner)
        return 4

    for rank in range(2):
        pod = training_pod(f"sized-workers-{rank}", "acct-size0", f"sz{rank}", T0)
        pod["metadata"]["labels"] = {"jobset.sigs.k8s.io/jobset-name": "acct-sized"}
        store.put("pod", pod)
    accountant = Accountant(store, now=T0, sizes=sizes)
    accountant.tick(T0)
    accountant.tick(T0 + datetime.timedelta(seconds=5))
    assert {(o.plural, o.namespace, o.name) for o in asked} == {("jobsets", "train", "acct-sized")}
    assert job_seconds("train/acct-sized", "productive") == 0.0
    assert job_seconds("train/acct-sized", "waiting") == pytest.approx(5.0)


STRAGGLER_JOB = "train/acct-slow"


def straggler_fleet(*names: str, **policy: Any) -> Store:
    store = Store()
    store.put("policy", policy_object(**policy))
    for name in names:
        store.put("node", node_object(name))
        store.put("gpunode", gpunode(name, healthy_status()))
    for rank, name in enumerate(names[:2]):  # the job runs on the first two
        pod = training_pod(f"slow-{rank}", name, f"slow-{rank}", T0)
        pod["metadata"]["labels"] = {JOB_LABEL: "acct-slow", JOB_SIZE_LABEL: "2"}
        store.put("pod", pod)
    return store


def rank_0_reports(store: Store, second: int, *slow: str, saved: int | None = None) -> None:
    """Rank 0 writes a report at ``T0 + second`` naming ``slow`` at twice the median."""
    pod = copy.deepcopy(store.pods[next(k for k in store.pods if k.endswith("slow-0"))])
    pod["metadata"]["resourceVersion"] = version()
    at = T0 + datetime.timedelta(seconds=second)
    progress = Progress(
        step=second,
        time=at,
        checkpoint_step=saved,
        checkpoint_time=T0 + datetime.timedelta(seconds=saved) if saved is not None else None,
        step_seconds=1.0,
        slowest=tuple(RankTime(node, 2.0) for node in slow),
    )
    pod["metadata"]["annotations"] = {PROGRESS_ANNOTATION: encode(progress)}
    store.put("pod", pod)


def test_a_node_its_jobs_reports_name_slow_three_times_is_a_straggler() -> None:
    store = straggler_fleet("acct-s0", "acct-s1", "acct-s9")
    woken: list[list[str]] = []
    accountant = Accountant(store, now=T0, wake=lambda nodes: woken.append(list(nodes)))
    for second in (1, 2):
        rank_0_reports(store, second, "acct-s1", "acct-s9")
        accountant.tick(T0 + datetime.timedelta(seconds=second, milliseconds=500))
    accountant.tick(T0 + datetime.timedelta(seconds=2, milliseconds=900))  # the same report
    assert store.stragglers == {}
    assert woken == []
    rank_0_reports(store, 3, "acct-s1", "acct-s9")
    accountant.tick(T0 + datetime.timedelta(seconds=3, milliseconds=500))
    # acct-s9 is in service under the same policy, but the job has no pod on it.
    assert list(store.stragglers) == ["acct-s1"]
    assert STRAGGLER_JOB in store.stragglers["acct-s1"]
    assert woken == [["acct-s1"]]
    accountant.tick(T0 + datetime.timedelta(seconds=4))
    assert woken == [["acct-s1"]]  # no news, no wake


def test_a_straggler_taken_out_leaves_the_verdicts_and_is_woken_once_more() -> None:
    store = straggler_fleet("acct-s2", "acct-s3")
    woken: list[list[str]] = []
    accountant = Accountant(store, now=T0, wake=lambda nodes: woken.append(list(nodes)))
    for second in (1, 2, 3):
        rank_0_reports(store, second, "acct-s3")
        accountant.tick(T0 + datetime.timedelta(seconds=second, milliseconds=500))
    assert list(store.stragglers) == ["acct-s3"]
    suspect = healthy_status().model_copy(update={"phase": Phase.SUSPECT})
    store.put("gpunode", gpunode("acct-s3", suspect))
    rank_0_reports(store, 4, "acct-s3")
    accountant.tick(T0 + datetime.timedelta(seconds=4, milliseconds=500))
    assert store.stragglers == {}
    assert woken == [["acct-s3"], ["acct-s3"]]


def test_no_straggler_where_the_policy_disables_them() -> None:
    store = straggler_fleet("acct-s4", "acct-s5", stragglers={"enabled": False})
    woken: list[list[str]] = []
    accountant = Accountant(store, now=T0, wake=lambda nodes: woken.append(list(nodes)))
    for second in (1, 2, 3, 4):
        rank_0_reports(store, second, "acct-s5")
        accountant.tick(T0 + datetime.timedelta(seconds=second, milliseconds=500))
    assert store.stragglers == {}
    assert woken == []


def test_a_jobs_new_checkpoint_is_kept_and_wakes_its_suspect_nodes() -> None:
    """Only a Suspect node waits for the checkpoint: the job's healthy nodes are not
    queued for a decision that changes nothing."""
    store = straggler_fleet("acct-s6", "acct-s7")
    suspect = healthy_status().model_copy(update={"phase": Phase.SUSPECT, "reason": "Nvlink"})
    store.put("gpunode", gpunode("acct-s7", suspect))
    woken: list[list[str]] = []
    accountant = Accountant(store, now=T0, wake=lambda nodes: woken.append(list(nodes)))
    rank_0_reports(store, 1)  # no checkpoint yet
    accountant.tick(T0 + datetime.timedelta(seconds=1, milliseconds=500))
    assert store.job_checkpoints == {}
    rank_0_reports(store, 2, saved=1)
    seen = T0 + datetime.timedelta(seconds=2, milliseconds=500)
    accountant.tick(seen)
    # Dated when the operator saw it, not by the time the job's node wrote into it.
    assert store.job_checkpoints == {STRAGGLER_JOB: seen}
    assert woken == [["acct-s7"]]
    rank_0_reports(store, 3, saved=1)  # the same checkpoint again: no news
    accountant.tick(T0 + datetime.timedelta(seconds=3, milliseconds=500))
    assert woken == [["acct-s7"]]
    for key in list(store.pods):
        store.put("pod", store.pods[key], deleted=True)
    accountant.tick(T0 + datetime.timedelta(seconds=4))
    accountant.tick(T0 + datetime.timedelta(seconds=5))
    assert store.job_checkpoints == {}  # the job is over


def test_a_checkpoint_the_job_had_when_first_seen_is_dated_before_any_take_out() -> None:
    """After a restart the operator cannot know when a checkpoint it never saw change
    was taken; the time in the report is the node's clock. It counts as old: a Suspect
    node waits for the next one (at most checkpointMaxDelay)."""
    store = straggler_fleet("acct-s8", "acct-s9")
    accountant = Accountant(store, now=T0)
    rank_0_reports(store, 1, saved=3600)  # a node clock an hour ahead
    accountant.tick(T0 + datetime.timedelta(seconds=1, milliseconds=500))
    assert store.job_checkpoints == {STRAGGLER_JOB: EPOCH}
