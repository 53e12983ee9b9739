"""Probe Jobs: the node's GPUs to themselves, CPU and memory as configured."""

from __future__ import annotations

from pitcrew.kube.jobs import probe_job


def test_probe_pods_take_every_gpu_and_the_configured_cpu_and_memory() -> None:
    job = probe_job(
        name="probe-n1",
        namespace="pitcrew-system",
        node="n1",
        suite="standard",
        gpus=8,
        image="probe:1",
        deadline_seconds=600,
        priority_class="pitcrew-probe",
        service_account="pc-pitcrew-probe",
        resources={"requests": {"cpu": "4", "nvidia.com/gpu": "1"}, "limits": {"memory": "64Gi"}},
    )
    pod = job["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "4", "nvidia.com/gpu": "8"}  # GPUs are not configurable
    assert resources["limits"] == {"memory": "64Gi", "nvidia.com/gpu": "8"}
    assert pod["serviceAccountName"] == "pc-pitcrew-probe"
    assert pod["priorityClassName"] == "pitcrew-probe"
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
