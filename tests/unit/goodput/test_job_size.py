"""A job's size from its launcher's object: the specs below are shaped as each
project's API types and documented examples are (kubernetes-sigs/jobset's
``simple.yaml``, kubeflow/training-operator's PyTorchJob and MPIJob examples,
volcano-sh/volcano's ``vcjob`` examples, a Kubernetes indexed Job)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from pitcrew.controller.job_sizes import FORBIDDEN_FOR, FRESH, RETRY, JobSizes
from pitcrew.core.job_discovery import identify
from pitcrew.core.job_size import Owner, declared_size, owner

GPU_POD = {"spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
CPU_POD = {"spec": {"containers": [{"name": "d", "resources": {"limits": {"cpu": "2"}}}]}}
JOBSET = Owner("jobset.x-k8s.io", "v1alpha2", "jobsets", "ml", "pretrain")
PYTORCH = Owner("kubeflow.org", "v1", "pytorchjobs", "ml", "bert")
MPI = Owner("kubeflow.org", "v2beta1", "mpijobs", "ml", "hvd")
VOLCANO = Owner("batch.volcano.sh", "v1alpha1", "jobs", "ml", "llm")
BATCH = Owner("batch", "v1", "jobs", "ml", "sweep")


def jobset(*jobs: tuple[int | None, int | None, dict[str, Any]]) -> dict[str, Any]:
    return {
        "spec": {
            "replicatedJobs": [
                {
                    "name": f"rj{i}",
                    **({"replicas": replicas} if replicas is not None else {}),
                    "template": {
                        "spec": {
                            **({"parallelism": parallel} if parallel is not None else {}),
                            "template": template,
                        }
                    },
                }
                for i, (replicas, parallel, template) in enumerate(jobs)
            ]
        }
    }


@pytest.mark.parametrize(
    ("who", "obj", "size"),
    [
        (JOBSET, jobset((4, 2, GPU_POD)), 8),
        (JOBSET, jobset((4, None, GPU_POD)), 4),  # parallelism unset is 1, as for a Job
        (JOBSET, jobset((None, None, GPU_POD)), 1),  # replicas unset is 1
        (JOBSET, jobset((1, 1, CPU_POD), (16, 1, GPU_POD)), 16),  # the CPU driver is no rank
        (
            PYTORCH,
            {
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {"replicas": 1, "template": GPU_POD},
                        "Worker": {"replicas": 3, "template": GPU_POD},
                    }
                }
            },
            4,
        ),
        (
            MPI,
            {
                "spec": {
                    "slotsPerWorker": 8,
                    "mpiReplicaSpecs": {
                        "Launcher": {"replicas": 1, "template": GPU_POD},
                        "Worker": {"replicas": 2, "template": GPU_POD},
                    },
                }
            },
            2,
        ),
        (
            VOLCANO,
            {
                "spec": {
                    "minAvailable": 3,
                    "tasks": [
                        {"name": "master", "replicas": 1, "template": CPU_POD},
                        {"name": "worker", "replicas": 6, "template": GPU_POD},
                    ],
                }
            },
            6,
        ),
        (BATCH, {"spec": {"completionMode": "Indexed", "completions": 4, "parallelism": 4}}, 4),
        (BATCH, {"spec": {"completions": 2, "parallelism": 8}}, 2),
        (BATCH, {"spec": {}}, 1),
    ],
)
def test_the_size_a_launcher_declares(who: Owner, obj: dict[str, Any], size: int) -> None:
    assert declared_size(who, obj) == size


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"spec": "nonsense"},
        jobset((-1, 1, GPU_POD)),
        jobset(("4", 1, GPU_POD)),  # type: ignore[arg-type]
        jobset((True, 1, GPU_POD)),
        jobset((1, 1, CPU_POD)),  # no GPU part: nothing to size
        jobset((1_000_000, 1, GPU_POD)),  # over any fleet: a typo, not a size
        {"spec": {"replicatedJobs": "nonsense"}},
    ],
)
def test_a_malformed_object_declares_no_size(obj: dict[str, Any]) -> None:
    assert declared_size(JOBSET, obj) is None


def pod_owner(labels: dict[str, str], refs: list[dict[str, Any]]) -> Owner | None:
    identity = identify(labels, {})
    assert identity is not None
    return owner(identity, "ml", labels, refs)


def test_each_launcher_is_read_where_it_lives() -> None:
    job_ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "pretrain-workers-0"}
    jobset_labels = {"jobset.sigs.k8s.io/jobset-name": "pretrain", "job-name": "x"}
    # A JobSet's pod is owned by a child Job: the JobSet is found by its label.
    assert pod_owner(jobset_labels, [{**job_ref, "controller": True}]) == JOBSET
    assert pod_owner({"volcano.sh/job-name": "llm"}, []) == VOLCANO
    kubeflow = {"training.kubeflow.org/job-name": "bert"}
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert"}
    assert pod_owner(kubeflow, [{**ref, "controller": True}]) == PYTORCH
    assert pod_owner(kubeflow, [ref]) is None  # an owner that does not control it
    assert pod_owner(kubeflow, [{**ref, "kind": "Notebook", "controller": True}]) is None
    batch = {"batch.kubernetes.io/job-name": "sweep"}
    sweep = {"apiVersion": "batch/v1", "kind": "Job", "name": "sweep", "controller": True}
    assert pod_owner(batch, [sweep]) == BATCH
    assert pod_owner({"pitcrew.dev/job": "mine"}, [sweep]) is None
    assert JOBSET.path == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/pretrain"
    assert JOBSET.kind == "jobsets.jobset.x-k8s.io"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Inline:
    """An executor that runs a task when told, so a test sees the cache between."""

    def __init__(self) -> None:
        self.tasks: list[Any] = []

    def submit(self, fn: Any, *args: Any) -> None:
        self.tasks.append((fn, args))

    def run(self) -> None:
        tasks, self.tasks = self.tasks, []
        for fn, args in tasks:
            fn(*args)


def test_sizes_are_read_once_off_the_caller_and_refreshed_when_stale() -> None:
    calls: list[Owner] = []
    answers = [jobset((4, 1, GPU_POD)), jobset((6, 1, GPU_POD))]

    def fetch(who: Owner) -> dict[str, Any]:
        calls.append(who)
        return answers.pop(0)

    clock, pool = Clock(), Inline()
    sizes = JobSizes(fetch, pool, clock=clock)  # type: ignore[arg-type]
    assert sizes.get(JOBSET) is None  # nothing read yet: the caller does not wait
    assert sizes.get(JOBSET) is None  # one read in flight, not two
    pool.run()
    assert (sizes.get(JOBSET), len(calls)) == (4, 1)
    clock.now += FRESH + 1
    assert sizes.get(JOBSET) == 4  # stale: the old answer while the new one is read
    pool.run()
    assert sizes.get(JOBSET) == 6


def test_a_kind_the_operator_may_not_read_is_not_asked_again_for_an_hour(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[Owner] = []

    def fetch(who: Owner) -> dict[str, Any]:
        calls.append(who)
        raise client.ApiException(status=403, reason="Forbidden")

    clock, pool = Clock(), Inline()
    said: list[str] = []
    sizes = JobSizes(fetch, pool, clock=clock, report=said.append)  # type: ignore[arg-type]
    other = Owner("jobset.x-k8s.io", "v1alpha2", "jobsets", "ml", "other")
    sizes.get(JOBSET)
    pool.run()
    clock.now += RETRY + 1
    assert sizes.get(other) is None
    pool.run()
    assert calls == [JOBSET]  # the whole kind is forbidden, not just one object
    assert sum("rbac.readJobSizes" in r.message for r in caplog.records) == 1
    assert "403" in said[-1]  # and in the policies' status (JobSizes=False)
    clock.now += FORBIDDEN_FOR
    sizes.get(other)
    pool.run()
    assert calls == [JOBSET, other]


def test_a_failed_read_keeps_the_last_size_and_is_retried() -> None:
    answers: list[Any] = [jobset((4, 1, GPU_POD)), client.ApiException(status=503)]

    def fetch(who: Owner) -> dict[str, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    clock, pool = Clock(), Inline()
    sizes = JobSizes(fetch, pool, clock=clock)  # type: ignore[arg-type]
    sizes.get(JOBSET)
    pool.run()
    clock.now += FRESH + 1
    sizes.get(JOBSET)
    pool.run()
    assert sizes.get(JOBSET) == 4
    assert not pool.tasks  # not asked again before RETRY
    clock.now += RETRY + 1
    answers.append(jobset((8, 1, GPU_POD)))
    sizes.get(JOBSET)
    pool.run()
    assert sizes.get(JOBSET) == 8


def test_reads_run_on_the_pool_not_the_calling_thread() -> None:
    seen: list[str] = []
    done = threading.Event()

    def fetch(who: Owner) -> dict[str, Any]:
        seen.append(threading.current_thread().name)
        done.set()
        return jobset((2, 1, GPU_POD))

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sizes") as pool:
        JobSizes(fetch, pool).get(JOBSET)
        assert done.wait(5)
    assert seen[0].startswith("sizes")


def test_a_version_no_longer_served_keeps_the_size_and_says_so_a_deleted_job_does_not() -> None:
    """JobSet upgraded past ``v1alpha2``: every JobSet answers 404 at the version Pitcrew
    reads. That is not a deleted job: the size last read stays, and the policies'
    status is told why until a read succeeds again."""
    answers: list[Any] = [jobset((4, 1, GPU_POD)), client.ApiException(status=404)]
    served = {"jobset.x-k8s.io": ["v1"]}
    said: list[str] = []

    def fetch(who: Owner) -> dict[str, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    clock, pool = Clock(), Inline()
    sizes = JobSizes(
        fetch,
        pool,  # type: ignore[arg-type]
        clock=clock,
        served=lambda who: served.get(who.group),
        report=said.append,
    )
    sizes.get(JOBSET)
    pool.run()
    clock.now += FRESH + 1
    sizes.get(JOBSET)
    pool.run()
    assert sizes.get(JOBSET) == 4
    assert "served as v1, not v1alpha2" in said[-1]
    clock.now += RETRY + 1
    served["jobset.x-k8s.io"] = ["v1alpha2", "v1"]  # served again
    answers.append(jobset((6, 1, GPU_POD)))
    sizes.get(JOBSET)
    pool.run()
    assert (sizes.get(JOBSET), said[-1]) == (6, "")
    clock.now += FRESH + 1
    answers.append(client.ApiException(status=404))  # now the job is gone: nothing to say
    sizes.get(JOBSET)
    pool.run()
    assert said[-1] == ""
