"""Training jobs are found from the labels their launchers put on pods.

The label sets are those each project's controller writes on the pods it creates
(read from kubernetes-sigs/jobset, kubeflow/trainer, kubeflow/training-operator,
kubeflow/mpi-operator, kubernetes-sigs/lws, volcano-sh/volcano and the Kubernetes
Job controller), for a 2-node job; UIDs and hashes are placeholders.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pitcrew.api.vocabulary import CHECKPOINT_ANNOTATION
from pitcrew.core.convert import node_view, pod_view, training_job
from pitcrew.core.job_discovery import JobIdentity, identify

BATCH_CHILD = {
    # A JobSet's or TrainJob's child Job adds its own labels to the pod.
    "batch.kubernetes.io/job-name": "train-workers-0",
    "job-name": "train-workers-0",
    "batch.kubernetes.io/controller-uid": "0b6e",
    "controller-uid": "0b6e",
    "batch.kubernetes.io/job-completion-index": "1",
}
JOBSET = {
    "jobset.sigs.k8s.io/jobset-name": "train",
    "jobset.sigs.k8s.io/replicatedjob-name": "workers",
    "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
    "jobset.sigs.k8s.io/global-replicas": "1",
    "jobset.sigs.k8s.io/job-index": "0",
    "jobset.sigs.k8s.io/job-global-index": "0",
    "jobset.sigs.k8s.io/job-key": "9f3c",
    "jobset.sigs.k8s.io/restart-attempt": "0",
    **BATCH_CHILD,
}
TRAINJOB = {
    **JOBSET,
    "jobset.sigs.k8s.io/jobset-name": "llama-ft",  # the TrainJob's own name
    "jobset.sigs.k8s.io/replicatedjob-name": "node",
    "trainer.kubeflow.org/trainjob-name": "llama-ft",
}
PYTORCHJOB_WORKER = {
    "training.kubeflow.org/job-name": "bert",
    "training.kubeflow.org/operator-name": "pytorchjob-controller",
    "training.kubeflow.org/replica-type": "worker",
    "training.kubeflow.org/replica-index": "0",
}
MPIJOB_WORKER = {
    "training.kubeflow.org/operator-name": "mpi-operator",
    "training.kubeflow.org/job-name": "hvd",
    "training.kubeflow.org/job-role": "worker",
    "training.kubeflow.org/replica-index": "1",
}
LWS_WORKER = {
    "leaderworkerset.sigs.k8s.io/name": "llm",
    "leaderworkerset.sigs.k8s.io/worker-index": "1",
    "leaderworkerset.sigs.k8s.io/group-index": "3",
    "leaderworkerset.sigs.k8s.io/group-key": "5d1a",
    "apps.kubernetes.io/pod-index": "1",
    "statefulset.kubernetes.io/pod-name": "llm-3-1",
}
LWS_ANNOTATIONS = {
    "leaderworkerset.sigs.k8s.io/size": "2",
    "leaderworkerset.sigs.k8s.io/leader-name": "llm-3",
}
VOLCANO = {
    "volcano.sh/job-name": "dist",
    "volcano.sh/job-namespace": "ml",
    "volcano.sh/task-spec": "worker",
    "volcano.sh/queue-name": "default",
}
INDEXED_JOB = {
    "batch.kubernetes.io/job-name": "ddp",
    "job-name": "ddp",
    "batch.kubernetes.io/controller-uid": "77aa",
    "controller-uid": "77aa",
    "batch.kubernetes.io/job-completion-index": "1",
}


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        (JOBSET, {}, JobIdentity("train", "jobset")),
        (TRAINJOB, {}, JobIdentity("llama-ft", "jobset")),
        (PYTORCHJOB_WORKER, {}, JobIdentity("bert", "kubeflow")),
        (MPIJOB_WORKER, {}, JobIdentity("hvd", "kubeflow")),
        (LWS_WORKER, LWS_ANNOTATIONS, JobIdentity("llm-3", "leaderworkerset", 2)),
        (VOLCANO, {"scheduling.k8s.io/group-name": "dist-4c2f"}, JobIdentity("dist", "volcano")),
        (INDEXED_JOB, {}, JobIdentity("ddp", "job")),
        ({"job-name": "old-cluster"}, {}, JobIdentity("old-cluster", "job")),
    ],
    ids=["jobset", "trainjob", "pytorchjob", "mpijob", "lws", "volcano", "job", "legacy-job"],
)
def test_each_launcher_names_its_job(
    labels: dict[str, str], annotations: dict[str, str], expected: JobIdentity
) -> None:
    assert identify(labels, annotations) == expected


def test_the_most_specific_launcher_wins_over_the_job_below_it() -> None:
    """A JobSet's pods carry their child Job's name too: the job is the JobSet, so
    one worker's loss interrupts all of it, not one child Job."""
    assert identify(JOBSET, {}) == JobIdentity("train", "jobset")


def test_pitcrews_own_label_overrides_any_launcher_and_declares_the_size() -> None:
    labels = {**JOBSET, "pitcrew.dev/job": "pretrain", "pitcrew.dev/job-size": "128"}
    assert identify(labels, {}) == JobIdentity("pretrain", "pitcrew", 128)


@pytest.mark.parametrize("size", ["0", "-2", "many", ""])
def test_a_size_that_is_no_positive_number_is_ignored(size: str) -> None:
    assert identify(LWS_WORKER, {"leaderworkerset.sigs.k8s.io/size": size}) == JobIdentity(
        "llm-3", "leaderworkerset"
    )


def test_a_pod_no_launcher_names_is_no_job() -> None:
    assert identify({"app": "web"}, {}) is None


def pod(labels: dict[str, str], *, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ml", "name": "w-0", "labels": labels},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Running"},
    }


def test_only_pods_that_request_gpus_are_a_training_jobs() -> None:
    """A CPU Job's pods (a data loader, a cron job) are no training job: neither
    accounted nor waited for at a checkpoint-aware drain."""
    assert training_job(pod(JOBSET, gpus=8)) == JobIdentity("train", "jobset")
    assert training_job(pod(INDEXED_JOB, gpus=0)) is None
    assert pod_view(pod(PYTORCHJOB_WORKER, gpus=8)).job == "bert"
    assert pod_view(pod(INDEXED_JOB, gpus=0)).job == ""


def test_pitcrews_own_probe_and_reset_pods_are_no_training_job() -> None:
    """Pitcrew's probe and reset Jobs ask for GPUs and carry a Job's labels."""
    probe = pod({**INDEXED_JOB, "pitcrew.dev/probe": "true"}, gpus=8)
    assert training_job(probe) is None
    assert pod_view(probe).job == ""


CHECKPOINT = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


def test_a_training_pod_checkpointed_when_its_jobs_rank_0_says() -> None:
    """Only rank 0 reports; every pod of its job checkpointed with it."""
    worker = pod(JOBSET, gpus=8)
    assert pod_view(worker).checkpoint_at is None
    assert pod_view(worker, {"ml/train": CHECKPOINT}).checkpoint_at == CHECKPOINT
    assert (
        node_view({"metadata": {"name": "n"}}, [worker], {"ml/train": CHECKPOINT})
        .pods[0]
        .checkpoint_at
        == CHECKPOINT
    )


def test_the_later_of_the_pods_annotation_and_its_jobs_checkpoint_wins() -> None:
    earlier, later = CHECKPOINT - datetime.timedelta(minutes=5), CHECKPOINT
    for own, jobs in ((earlier, later), (later, earlier)):
        worker = pod(JOBSET, gpus=8)
        worker["metadata"]["annotations"] = {CHECKPOINT_ANNOTATION: own.isoformat()}
        assert pod_view(worker, {"ml/train": jobs}).checkpoint_at == later


def test_a_jobs_checkpoint_is_not_another_namespaces_nor_another_pods() -> None:
    checkpoints = {"ml/train": CHECKPOINT}
    elsewhere = pod(JOBSET, gpus=8)
    elsewhere["metadata"]["namespace"] = "other"
    assert pod_view(elsewhere, checkpoints).checkpoint_at is None
    assert pod_view(pod(PYTORCHJOB_WORKER, gpus=8), checkpoints).checkpoint_at is None
    # The JobSet is the job, not its child Job.
    child = {"ml/train-workers-0": CHECKPOINT}
    assert pod_view(pod(JOBSET, gpus=8), child).checkpoint_at is None
    # A pod with the job's labels that asks for no GPU is no training pod of it.
    assert pod_view(pod(JOBSET, gpus=0), checkpoints).checkpoint_at is None
    # Nor is Pitcrew's own probe, which asks for GPUs.
    probe = pod({**JOBSET, "pitcrew.dev/probe": "true"}, gpus=8)
    assert pod_view(probe, checkpoints).checkpoint_at is None
