"""The operator's pre-pull loop on a spare (with fakes for the API): one pod pulls the
pool's largest training job's images, the node's own image list says when they are
there, and the pod is deleted once it ended."""

from __future__ import annotations

import datetime
from typing import Any

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import PRE_PULL_LABEL
from pitcrew.controller.prepull import PrePuller
from pitcrew.core.prepull import RETRY_AFTER
from support.shell_fakes import Shell, healthy_status, policy_object, version

PYTORCH = "nvcr.io/nvidia/pytorch:24.05-py3"


def trainer(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "train",
            "uid": f"uid-{name}",
            "resourceVersion": version(),
            "labels": {"jobset.sigs.k8s.io/jobset-name": "llm"},
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": "trainer",
            "imagePullSecrets": [{"name": "ngc"}],
            "containers": [
                {"name": "t", "image": PYTORCH, "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ],
        },
        "status": {"phase": "Running"},
    }


def landed(created: dict[str, Any], node: str, phase: str) -> dict[str, Any]:
    """The pre-pull pod as the watch shows it once scheduled to ``node``."""
    return {
        **created,
        "metadata": {**created["metadata"], "uid": "uid-pull", "resourceVersion": version()},
        "spec": {**created["spec"], "nodeName": node},
        "status": {"phase": phase},
    }


def spare_shell(**spares: Any) -> tuple[Shell, PrePuller]:
    shell = Shell(
        nodes={n: healthy_status() for n in ("n0", "n1", "n2")},
        policy=policy_object(spares={"count": 1, **spares}, safety={"maxUnhealthy": 2}),
    )
    shell.rounds.observe("pod", trainer("trainer-1", "n1"))
    shell.rounds.observe("pod", trainer("trainer-2", "n2"))
    shell.settle()
    assert shell.phase("n0") is Phase.SPARE
    puller = PrePuller(
        store=shell.store,
        cluster=shell.cluster,
        events=shell.events,
        leading=lambda _: True,
        clock=lambda: shell.now,
    )
    return shell, puller


def test_a_spare_pulls_the_jobs_images_once_and_shows_them_when_its_kubelet_has_them() -> None:
    shell, puller = spare_shell()
    shell.cluster.calls.clear()
    shell.events.posted.clear()
    puller.act(puller.snapshot())
    [created] = shell.cluster.writes("create_pod")
    spec = created["spec"]
    assert created["metadata"]["namespace"] == "train"
    assert [c["image"] for c in spec["containers"]] == [PYTORCH]
    assert spec["containers"][0]["command"] == ["true"]
    assert spec["imagePullSecrets"] == [{"name": "ngc"}]
    assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == ("trainer", False)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n0"]
    assert shell.events.reasons("Node") == ["PrePullStarted"]

    shell.rounds.observe("pod", landed(created, "n0", "Running"))
    puller.act(puller.snapshot())
    assert len(shell.cluster.writes("create_pod")) == 1  # one pod per spare and image set
    assert shell.cluster.writes("apply_gpunode_images") == []

    shell.cluster.node_images["n0"] = [PYTORCH]  # the kubelet's part: it reports the pull
    shell.rounds.observe("pod", landed(created, "n0", "Succeeded"))
    puller.act(puller.snapshot())
    assert shell.cluster.writes("apply_gpunode_images") == [("n0", [PYTORCH])]
    assert shell.store.status("n0").images == [PYTORCH]
    name = created["metadata"]["name"]
    assert shell.cluster.writes("delete_pod") == [f"train/{name}"]
    assert shell.events.reasons("Node") == ["PrePullStarted", "ImagesPrePulled"]
    assert len(shell.cluster.writes("create_pod")) == 1

    shell.round("n0")  # the rounds' own status writes keep the pre-pull loop's field
    assert shell.store.status("n0").images == [PYTORCH]


def test_a_pod_that_ended_without_the_images_listed_is_retried_only_after_a_while() -> None:
    shell, puller = spare_shell()
    puller.act(puller.snapshot())
    [created] = shell.cluster.writes("create_pod")
    ended = landed(created, "n0", "Failed")
    finished = {"terminated": {"finishedAt": shell.now.isoformat().replace("+00:00", "Z")}}
    ended["status"]["containerStatuses"] = [{"name": "pull-0", "state": finished}]
    shell.rounds.observe("pod", ended)  # the registry refused it, say: nothing listed
    shell.now += RETRY_AFTER - datetime.timedelta(seconds=1)
    puller.act(puller.snapshot())
    assert shell.cluster.writes("delete_pod") == []
    assert len(shell.cluster.writes("create_pod")) == 1
    shell.now += datetime.timedelta(seconds=1)
    puller.act(puller.snapshot())
    assert shell.cluster.writes("delete_pod") == [f"train/{created['metadata']['name']}"]
    shell.rounds.observe("pod", ended, deleted=True)
    puller.act(puller.snapshot())
    assert len(shell.cluster.writes("create_pod")) == 2  # pulled again


def test_a_spare_taken_for_the_job_no_longer_shows_images_and_an_ended_pod_goes() -> None:
    shell, puller = spare_shell()
    shell.cluster.node_images["n0"] = [PYTORCH]
    puller.act(puller.snapshot())
    assert shell.cluster.writes("create_pod") == []  # it holds them already
    assert shell.store.status("n0").images == [PYTORCH]

    shell.fail("n1")
    shell.round("n1")
    shell.round("n0")
    assert shell.phase("n0") is Phase.HEALTHY  # reserved for the job
    failed = {
        "metadata": {
            "name": "pitcrew-pre-pull-n0-old",
            "namespace": "train",
            "resourceVersion": version(),
            "labels": {PRE_PULL_LABEL: "old"},
        },
        "spec": {"nodeName": "n0"},
        "status": {"phase": "Failed"},
    }
    shell.rounds.observe("pod", failed)
    shell.cluster.calls.clear()
    puller.act(puller.snapshot())
    assert shell.cluster.writes("apply_gpunode_images") == [("n0", [])]
    assert shell.cluster.writes("delete_pod") == ["train/pitcrew-pre-pull-n0-old"]


def test_a_policy_that_does_not_pre_pull_and_a_follower_do_nothing() -> None:
    shell, puller = spare_shell(prePullImages=False)
    puller.act(puller.snapshot())
    assert shell.cluster.writes("create_pod") == []
    shell, puller = spare_shell()
    puller.leading = lambda _: False
    puller.act(puller.snapshot())
    assert shell.cluster.writes("create_pod") == []
