"""Training jobs as their launchers create them, for the e2e tests: the launcher's
object (its CRD installed as the project publishes it) and its pods with the labels
its controller puts on them, no ``pitcrew.dev/*`` label."""

from __future__ import annotations

from kubernetes import client

from support.fleet import Fleet, crd

GPU_POD = {
    "spec": {
        "containers": [
            {
                "name": "train",
                "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": "8"}},
            }
        ]
    }
}


def jobset(
    api: client.ApiClient,
    fleet: Fleet,
    namespace: str,
    name: str,
    nodes: list[str],
    *,
    declared: int | None = None,
) -> list[str]:
    """A JobSet of one GPU worker per node in ``nodes`` (it declares ``declared``
    workers, else as many), and its pods on them; the pods' names, rank 0 first."""
    crd(api, "jobset.x-k8s.io", "v1alpha2", "JobSet")
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        "jobset.x-k8s.io",
        "v1alpha2",
        namespace,
        "jobsets",
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "replicas": declared or len(nodes),
                        "template": {"spec": {"template": GPU_POD}},
                    }
                ]
            },
        },
    )
    owner = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": name,
        "uid": created["metadata"]["uid"],
    }
    pods = []
    for index, node in enumerate(nodes):
        child = f"{name}-workers-{index}"
        fleet.pod(
            namespace,
            f"{child}-0",
            node,
            owners=[owner],
            labels={
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "jobset.sigs.k8s.io/job-index": str(index),
                "batch.kubernetes.io/job-name": child,
                "job-name": child,
                "batch.kubernetes.io/job-completion-index": "0",
            },
        )
        pods.append(f"{child}-0")
    return pods
