"""Which images a spare pulls ahead of need (pitcrew.core.prepull): the pool's largest
running training job's, read against what the node's kubelet reports it holds."""

from __future__ import annotations

import datetime
from typing import Any

from pitcrew.api.vocabulary import PRE_PULL_LABEL
from pitcrew.core.prepull import (
    RETRY_AFTER,
    ended_at,
    held,
    holding,
    normalized,
    plan,
    running_jobs,
    stale,
)

PYTORCH = "nvcr.io/nvidia/pytorch:24.05-py3"
SIDECAR = "busybox:1.36"


def pod_object(
    name: str,
    *,
    job: str,
    images: tuple[str, ...] = (PYTORCH,),
    phase: str = "Running",
    gpus: int = 8,
    namespace: str = "train",
) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", "image": image, "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        for i, image in enumerate(images)
    ]
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"jobset.sigs.k8s.io/jobset-name": job},
        },
        "spec": {
            "containers": containers,
            "imagePullSecrets": [{"name": "ngc"}],
            "serviceAccountName": "trainer",
        },
        "status": {"phase": phase},
    }


def test_references_read_as_the_kubelet_reports_them() -> None:
    assert normalized("busybox") == "docker.io/library/busybox:latest"
    assert normalized(SIDECAR) == "docker.io/library/busybox:1.36"
    assert normalized("org/app:1") == "docker.io/org/app:1"
    assert normalized(PYTORCH) == PYTORCH
    assert normalized("localhost:5000/app") == "localhost:5000/app:latest"
    assert normalized("app@sha256:ab") == "docker.io/library/app@sha256:ab"


def test_the_largest_running_job_comes_first_with_its_images_and_secrets() -> None:
    pods = [
        pod_object("small-0", job="small", images=("small:1",)),
        pod_object("big-1", job="big", images=(PYTORCH, SIDECAR)),
        pod_object("big-0", job="big", images=(PYTORCH, SIDECAR)),
        pod_object("big-2", job="big", phase="Pending"),  # not running: not counted
        pod_object("web-0", job="web", gpus=0),  # no GPUs: no training job
    ]
    jobs = running_jobs(pods)
    assert [(j.job, j.pods) for j in jobs] == [("big", 2), ("small", 1)]
    assert jobs[0].images == (SIDECAR, PYTORCH)
    assert (jobs[0].pull_secrets, jobs[0].service_account) == (("ngc",), "trainer")


def test_a_spare_pulls_every_image_of_the_job_until_it_holds_them_all() -> None:
    job = running_jobs([pod_object("big-0", job="big", images=(PYTORCH, SIDECAR))])[0]
    nothing = held({"status": {"images": []}})
    first = plan("spare-0", nothing, job)
    assert first is not None
    assert first.images == (SIDECAR, PYTORCH)
    assert (first.namespace, first.pull_secrets) == ("train", ("ngc",))
    half = held({"status": {"images": [{"names": [PYTORCH, f"{PYTORCH}@sha256:ab"]}]}})
    again = plan("spare-0", half, job)
    assert again is not None
    assert again.key == first.key  # the same pod while the pull goes on
    assert holding(job, half) == [PYTORCH]
    both = held({"status": {"images": [{"names": [PYTORCH]}, {"names": [normalized(SIDECAR)]}]}})
    assert plan("spare-0", both, job) is None
    assert holding(job, both) == [SIDECAR, PYTORCH]


def test_no_running_job_pulls_nothing_and_two_spares_pods_differ() -> None:
    assert plan("spare-0", frozenset(), None) is None
    assert holding(None, frozenset({PYTORCH})) == []
    job = running_jobs([pod_object("big-0", job="big")])[0]
    one, two = plan("spare-0", frozenset(), job), plan("spare-1", frozenset(), job)
    assert one is not None
    assert two is not None
    assert one.key != two.key


def test_a_pre_pull_pod_goes_when_unwanted_of_another_set_or_long_ended() -> None:
    job = running_jobs([pod_object("big-0", job="big")])[0]
    wanted = plan("spare-0", frozenset(), job)
    assert wanted is not None
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

    def pre_pull(key: str, phase: str, finished: datetime.datetime | None = None) -> Any:
        state = {"terminated": {"finishedAt": finished.isoformat()}} if finished else {}
        return {
            "metadata": {"labels": {PRE_PULL_LABEL: key}},
            "status": {"phase": phase, "containerStatuses": [{"state": state}]},
        }

    assert not stale(pre_pull(wanted.key, "Running"), wanted=wanted, now=now)
    assert stale(pre_pull(wanted.key, "Running"), wanted=None, now=now)
    assert stale(pre_pull("other", "Running"), wanted=wanted, now=now)
    recent = pre_pull(wanted.key, "Failed", now - RETRY_AFTER / 2)
    assert ended_at(recent) == now - RETRY_AFTER / 2
    assert not stale(recent, wanted=wanted, now=now)
    assert stale(pre_pull(wanted.key, "Failed", now - RETRY_AFTER), wanted=wanted, now=now)
    assert stale(pre_pull(wanted.key, "Succeeded"), wanted=wanted, now=now)  # no time said
