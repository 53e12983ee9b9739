"""Probe Jobs: the node's GPUs to themselves, CPU and memory as configured."""

from __future__ import annotations

from pitcrew.kube.jobs import JobPods, pair_jobs, pinned_to, probe_job, reset_job


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
        pods=JobPods(image_pull_secrets=("regcred",), runtime_class="nvidia"),
    )
    pod = job["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "4", "nvidia.com/gpu": "8"}  # GPUs are not configurable
    assert resources["limits"] == {"memory": "64Gi", "nvidia.com/gpu": "8"}
    assert pod["serviceAccountName"] == "pc-pitcrew-probe"
    assert pod["priorityClassName"] == "pitcrew-probe"
    assert "nodeSelector" not in pod
    assert pod["affinity"] == pinned_to("n1")
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["runtimeClassName"] == "nvidia"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == [
        "--job",
        "probe-n1",
    ]


def test_reset_and_pair_jobs_carry_the_clusters_pull_secrets_and_runtime() -> None:
    pods = JobPods(image_pull_secrets=("regcred",), runtime_class="nvidia")
    reset = reset_job(
        name="fix", namespace="ns", node="n1", gpus=(3,), image="cuda", deadline_seconds=60,
        service_account="sa", pods=pods,
    )  # fmt: skip
    pairs = pair_jobs(
        run="r", pair="a--b", attempt=1, nodes=["a", "b"], master_address="10.0.0.1",
        namespace="ns", image="probe", gpus=8, deadline_seconds=60, service_account="sa",
        pods=pods, priority_class="pitcrew-probe",
        resources={"requests": {"cpu": "4"}, "limits": {"memory": "8Gi"}},
    )  # fmt: skip
    for job in (reset, *pairs):
        spec = job["spec"]["template"]["spec"]
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert spec["runtimeClassName"] == "nvidia"
    for job in pairs:
        spec = job["spec"]["template"]["spec"]
        assert spec["priorityClassName"] == "pitcrew-probe"
        container = spec["containers"][0]
        assert container["resources"]["requests"] == {"cpu": "4", "nvidia.com/gpu": "8"}
        assert container["terminationMessagePath"] == "/dev/termination-log"


def test_every_job_is_pinned_by_the_nodes_name_never_by_a_label_its_kubelet_writes() -> None:
    """The kubelet may set ``kubernetes.io/hostname`` to anything: root on one node
    could claim another's name and draw its probe or reset. The Node's name cannot be."""
    pods = JobPods()
    reset = reset_job(
        name="fix", namespace="ns", node="n1", gpus=(), image="cuda", deadline_seconds=60,
        service_account="sa", pods=pods,
    )  # fmt: skip
    probe = probe_job(
        name="p", namespace="ns", node="n1", suite="quick", gpus=8, image="probe",
        deadline_seconds=60, priority_class="", service_account="sa", pods=pods,
    )  # fmt: skip
    pairs = pair_jobs(
        run="r", pair="n1--n2", attempt=1, nodes=["n1", "n2"], master_address="10.0.0.1",
        namespace="ns", image="probe", gpus=8, deadline_seconds=60, service_account="sa",
        pods=pods,
    )  # fmt: skip
    for job, node in ((reset, "n1"), (probe, "n1"), (pairs[0], "n1"), (pairs[1], "n2")):
        spec = job["spec"]["template"]["spec"]
        assert "nodeSelector" not in spec
        required = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert required["nodeSelectorTerms"] == [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
