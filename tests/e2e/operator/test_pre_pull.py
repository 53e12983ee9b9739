"""An idle spare pulls the training job's images before any fault, on the devcluster.

Three 8-GPU nodes under a policy that holds one spare and names a probe PriorityClass;
a two-pod training job (a Deployment whose pods carry a JobSet's job label, run as
their own ServiceAccount with a pull secret) fills the other two. Pitcrew creates one
pre-pull pod in the job's namespace, on the spare, with the job's image, pull secret
and ServiceAccount, at the low priority, no token, a sliver of CPU. kwok pulls nothing,
so the test plays the kubelet's part: the pod's containers end (``true`` exits at
once) and the Node's ``status.images`` lists the image. Then the GPUNode shows the
image, the pod is deleted and none is made again. The seconds from the job Running to
its pre-pull pod on the spare, and from the kubelet's image list to the GPUNode, are
printed (docs/benchmarks.md, "Pre-pulled spares").
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from pitcrew.controller.prepull import INTERVAL
from support.fleet import PROBE_PRIORITY, Fleet, eventually, probe_priority

IMAGE = "registry.example/llm/trainer:1"
JOBSET = "jobset.sigs.k8s.io/jobset-name"
PRE_PULL = "pitcrew.dev/pre-pull"


def job_pod_spec(group: str) -> dict[str, Any]:
    return {
        "nodeSelector": {"e2e.pitcrew.dev/group": group},
        "terminationGracePeriodSeconds": 1,
        "serviceAccountName": "trainer",
        "imagePullSecrets": [{"name": "registry"}],
        "containers": [
            {"name": "train", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "8"}}}
        ],
    }


def test_a_spare_pulls_the_jobs_image_as_the_job_and_shows_it_once_its_kubelet_has_it(
    fleet_factory: type[Fleet], workload_namespace: str
) -> None:
    fleet = fleet_factory(size=3)
    probe_priority(fleet.api)
    fleet.policy(spares={"count": 1}, validation={"priorityClassName": PROBE_PRIORITY})
    settled = eventually(
        lambda: (
            (phases := {n: fleet.phase(n) for n in fleet.nodes})
            and sorted(phases.values()) == ["Healthy", "Healthy", "Spare"]
            and phases
        ),
        timeout=60,
        what="two nodes Healthy and one Spare",
    )
    spare = next(n for n, phase in settled.items() if phase == "Spare")
    fleet.core.create_namespaced_service_account(
        workload_namespace, {"metadata": {"name": "trainer"}}
    )
    labels = {"app": "llm", JOBSET: "llm"}
    client.AppsV1Api(fleet.api).create_namespaced_deployment(
        workload_namespace,
        {
            "metadata": {"name": "llm"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": job_pod_spec(fleet.group)},
            },
        },
    )

    def pre_pulls() -> list[client.V1Pod]:
        return list(
            fleet.core.list_namespaced_pod(workload_namespace, label_selector=PRE_PULL).items
        )

    def job_pods() -> list[client.V1Pod]:
        return list(
            fleet.core.list_namespaced_pod(workload_namespace, label_selector="app=llm").items
        )

    eventually(
        lambda: len(pods := job_pods()) == 2 and all(p.status.phase == "Running" for p in pods),
        timeout=60,
        what="the job's two pods Running",
    )
    running = time.monotonic()
    pulling: client.V1Pod = eventually(
        lambda: next((p for p in pre_pulls() if p.spec.node_name == spare), None),
        timeout=60,
        what="a pre-pull pod scheduled to the spare",
    )
    created = time.monotonic() - running
    spec = pulling.spec
    assert [(c.image, c.command) for c in spec.containers] == [(IMAGE, ["true"])]
    assert spec.containers[0].resources.requests == {"cpu": "10m", "memory": "32Mi"}
    assert [s.name for s in spec.image_pull_secrets] == ["registry"]
    assert (spec.service_account_name, spec.automount_service_account_token) == ("trainer", False)
    assert (spec.priority_class_name, spec.priority) == (PROBE_PRIORITY, -10)
    assert spec.restart_policy == "Never"
    fleet.wait_events(spare, "PrePullStarted")

    # The kubelet's part: it pulled the image, and the container's `true` ended.
    fleet.core.patch_node_status(
        spare, {"status": {"images": [{"names": [IMAGE], "sizeBytes": 10_000_000_000}]}}
    )
    fleet.core.patch_namespaced_pod_status(
        pulling.metadata.name, workload_namespace, {"status": {"phase": "Succeeded"}}
    )
    reported = time.monotonic()
    eventually(
        lambda: fleet.gpunode(spare)["status"].get("images") == [IMAGE],
        timeout=3 * INTERVAL,
        what="the spare's GPUNode showing the job's image",
    )
    shown = time.monotonic() - reported
    print(
        f"\njob Running to its pre-pull pod on the spare: {created:.1f} s; "
        f"the kubelet's image list to GPUNode status.images: {shown:.1f} s"
    )
    eventually(
        lambda: not fleet.pod_exists(workload_namespace, pulling.metadata.name),
        timeout=3 * INTERVAL,
        what="the ended pre-pull pod deleted",
    )
    fleet.wait_events(spare, "PrePullStarted", "ImagesPrePulled")
    assert fleet.phase(spare) == "Spare"
    # A pass later: the spare holds the image, so no pod pulls it again.
    time.sleep(INTERVAL + 2)
    assert pre_pulls() == []
    assert fleet.gpunode(spare)["status"].get("images") == [IMAGE]
