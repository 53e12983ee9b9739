"""The shipped chart on a real node: the agent reads the kernel log, the operator runs as a
pod from the image, and a fatal Xid in the node's kernel log takes the node out.

kwok's nodes run no containers, so the chart's pods never really run in the other
tests. Here the devcluster has one real kubelet node (``devcluster up --real-nodes``),
the operator image from dist/ is imported into its containerd, and the chart is
installed from charts/pitcrew as a user would, with the agent DaemonSet and the
operator Deployment on that node. The operator drains the node it runs on: the
workload first, its own pod last (its replacement cannot come back to the cordoned
node), and an operator on the host, as a replica elsewhere would, takes the Lease over
and begins the remediation. One change is made on the way in (a Helm
post-renderer): the agent gets ``--simulated``, since the node has no GPUs; its
simulated GPUs still read the node's real ``/dev/kmsg`` as the chart mounts it, so
a driver line written there is the fault.

The module has a devcluster of its own: a real node changes the host's networking,
and everything it changed goes with its ``down``. It runs where a kubelet can, as
root with cgroups (CI does); elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import textwrap
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuhealth.backends.sim import SimBackend
from gpuhealth.models import get_model
from pitcrew.api.meta import GROUP, VERSION
from pitcrew.api.vocabulary import AGENT_MANAGER, OPERATOR_MANAGER, QUARANTINE_TAINT
from pitcrew.dev import devcluster
from pitcrew.dev.devcluster import build, realnode
from pitcrew.kube.client import api_client, to_dict
from support.fleet import eventually

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "pitcrew"
IMAGE_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
ARCHIVE = ROOT / "dist" / f"pitcrew-{IMAGE_VERSION}.oci.tar"
NODE = "real-node-0"
KWOK_NODE = "gpu-node-0000"
RELEASE, NAMESPACE = "pc", "pitcrew-system"
PREFIX = f"{RELEASE}-pitcrew"
HOSTNAME = "kubernetes.io/hostname"
VALUES: dict[str, Any] = {
    "image": {"repository": "localhost/pitcrew", "tag": IMAGE_VERSION, "pullPolicy": "Never"},
    "operator": {
        "replicas": 1,
        "nodeSelector": {HOSTNAME: NODE},
        "settings": {"rounds": {"resync": "2s"}},
    },
    "agent": {"nodeSelector": {HOSTNAME: NODE}, "interval": "2s", "heartbeat": "30s"},
    "policy": {
        "spec": {
            "validation": {"burnInOnJoin": False},
            "checks": {"interval": "2s", "heartbeat": "30s"},
            "safety": {"maxUnhealthy": 2},
        }
    },
}
"""The chart's defaults but for: the imported image, the pods on the real node, and a
policy that neither burns a joining node in (there is no probe image) nor waits."""
SIMULATED = textwrap.dedent(
    """\
    import sys, yaml
    documents = [d for d in yaml.safe_load_all(sys.stdin) if d]
    for document in documents:
        if document["kind"] == "DaemonSet":
            document["spec"]["template"]["spec"]["containers"][0]["args"].append("--simulated")
    yaml.safe_dump_all(documents, sys.stdout)
    """
)
"""The Helm post-renderer: the agent's one change, simulated GPUs."""


def lacking() -> str:
    """Why a kubelet cannot run here, or nothing."""
    if os.geteuid() != 0:
        return "a real node needs root (a kubelet manages cgroups, mounts and links)"
    if not any(Path("/sys/fs/cgroup").iterdir()):
        return "a real node needs cgroups: nothing is mounted at /sys/fs/cgroup"
    return ""


pytestmark = pytest.mark.skipif(bool(lacking()), reason=lacking() or "-")


def kubectl() -> str:
    bundled = Path(sys.executable).with_name("kubectl")
    return str(bundled) if bundled.exists() else "kubectl"


@dataclass(frozen=True)
class RealCluster:
    kubeconfig: str
    api: client.ApiClient
    directory: Path

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def exec(self, pod: str, *command: str) -> str:
        done = subprocess.run(
            [kubectl(), "--kubeconfig", self.kubeconfig, "-n", NAMESPACE, "exec", pod, "--",
             *command],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def pod_on_node(self, component: str) -> dict[str, Any]:
        """The Running pod of the chart's ``component`` on the real node, or nothing."""
        pods = self.core.list_namespaced_pod(
            NAMESPACE, label_selector=f"app.kubernetes.io/component={component}"
        ).items
        running = [
            to_dict(self.api, p)
            for p in pods
            if p.spec.node_name == NODE and p.status.phase == "Running"
        ]
        return running[0] if running else {}

    def gpunode(self, name: str) -> dict[str, Any]:
        try:
            found: dict[str, Any] = client.CustomObjectsApi(self.api).get_cluster_custom_object(
                GROUP, VERSION, "gpunodes", name
            )
        except client.ApiException as error:
            if error.status == 404:
                return {}
            raise
        return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    if not ARCHIVE.is_file():
        pytest.fail(
            f"{ARCHIVE.relative_to(ROOT)} is missing: build it with "
            "`make images IMAGES=pitcrew` (make test does, before the tests)",
            pytrace=False,
        )
    directory = Path(tmp_path_factory.mktemp("realnode"))
    state = devcluster.up(
        directory=directory, node_count=1, gpus_per_node=8, model=get_model("H100"), real_nodes=1
    )
    try:
        started = time.monotonic()
        (node,) = realnode.real_nodes(directory, [0])
        realnode.import_image(node, ARCHIVE)
        print(f"image imported in {time.monotonic() - started:.1f}s")
        yield RealCluster(state.kubeconfig, api_client(state.kubeconfig), directory)
    finally:
        devcluster.down(directory=directory, log=lambda _: None)


@pytest.fixture(scope="module")
def release(cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = Path(tmp_path_factory.mktemp("release"))
    values = folder / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    renderer = folder / "simulated-gpus"
    renderer.write_text(f"#!{sys.executable}\n{SIMULATED}")
    renderer.chmod(0o755)
    subprocess.run(
        [str(build.ensure_helm()), "--kubeconfig", cluster.kubeconfig, "install", RELEASE,
         str(CHART), "-n", NAMESPACE, "--create-namespace", "-f", str(values),
         "--post-renderer", str(renderer)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return RELEASE


def started_in(pod: dict[str, Any]) -> float:
    """Seconds from the pod's creation to its container's start."""
    created = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
    running = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    return (datetime.datetime.fromisoformat(running) - created).total_seconds()


def test_the_chart_runs_on_a_real_node_and_takes_it_out_on_a_fatal_xid_in_its_kernel_log(
    cluster: RealCluster, release: str
) -> None:
    agent = eventually(
        lambda: cluster.pod_on_node("agent"), timeout=180, what=f"the agent Running on {NODE}"
    )
    operator = eventually(
        lambda: cluster.pod_on_node("operator"), timeout=180, what=f"the operator on {NODE}"
    )
    print(f"agent pod started in {started_in(agent):.1f}s, operator in {started_in(operator):.1f}s")

    # The agent reports for its own node with the token bound to its pod; the kernel
    # log is readable (no error in its report) and the node is in service.
    eventually(
        lambda: (cluster.gpunode(NODE).get("status") or {}).get("phase") == "Healthy",
        timeout=120, what=f"{NODE} Healthy (now {cluster.gpunode(NODE).get('status')})",
    )  # fmt: skip
    results = cluster.gpunode(NODE)["status"]["checks"]["results"]
    assert not [r for r in results if r["status"] == "error"], results  # the log was read
    writers = {
        entry["manager"]
        for entry in cluster.gpunode(NODE)["metadata"]["managedFields"]
        if "f:checks" in json.dumps(entry.get("fieldsV1", {}))
    }
    assert AGENT_MANAGER in writers

    # ... and is refused, with that same token, when it writes another node's GPUNode.
    eventually(lambda: cluster.gpunode(KWOK_NODE), timeout=60, what=f"{KWOK_NODE}'s GPUNode")
    said = cluster.exec(
        agent["metadata"]["name"], "/opt/pitcrew/bin/python", "-c", textwrap.dedent(
            f"""\
            from kubernetes import client
            from pitcrew.kube import gpunodes
            from pitcrew.kube.client import api_client
            try:
                gpunodes.apply_status(api_client(None), node="{KWOK_NODE}",
                    status={{"lastHeartbeat": "2026-12-01T12:00:00Z"}}, manager="{AGENT_MANAGER}")
                print("admitted")
            except client.ApiException as error:
                print(error.status, error.body)
            """
        ),
    )  # fmt: skip
    assert said.startswith("403"), said
    assert f"may write only its own GPUNode, not {KWOK_NODE}" in said

    # A workload on the node, then the driver's line for GPU 0 in the node's kernel log.
    work = f"work-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace({"metadata": {"name": work}})
    cluster.core.create_namespaced_pod(
        work,
        {
            "metadata": {"name": "trainer"},
            "spec": {
                "nodeSelector": {HOSTNAME: NODE},
                "containers": [
                    {"name": "main", "image": realnode.PAUSE_IMAGE, "imagePullPolicy": "Never"}
                ],
            },
        },
    )
    eventually(
        lambda: cluster.core.read_namespaced_pod("trainer", work).status.phase == "Running",
        timeout=60, what="the workload Running",
    )  # fmt: skip
    bus = SimBackend(node=NODE, model=get_model("H100")).identity(0).pci_bus_id
    written = time.monotonic()
    Path("/dev/kmsg").write_text(
        f"NVRM: Xid (PCI:{bus[4:14]}): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
    )

    def cordoned() -> bool:
        node = cluster.core.read_node(NODE)
        taints = {t.key: t.value for t in node.spec.taints or []}
        return bool(node.spec.unschedulable) and taints.get(QUARANTINE_TAINT) == "Xid"

    eventually(cordoned, timeout=60, what=f"{NODE} cordoned and tainted for the Xid")
    cordon_s = time.monotonic() - written

    def leaving(namespace: str, name: str) -> Callable[[], bool]:
        def check() -> bool:
            try:
                pod = cluster.core.read_namespaced_pod(name, namespace)
            except client.ApiException as error:
                return error.status == 404
            return pod.metadata.deletion_timestamp is not None

        return check

    eventually(leaving(work, "trainer"), timeout=60, what="the workload evicted")
    evict_s = time.monotonic() - written
    node = to_dict(cluster.api, cluster.core.read_node(NODE))
    cordoners = {
        e["manager"]
        for e in node["metadata"]["managedFields"]
        if "f:unschedulable" in json.dumps(e)
    }
    assert cordoners == {OPERATOR_MANAGER}  # the operator, running in its pod on the node
    assert operator["spec"]["nodeName"] == NODE

    # The operator's own pod goes last, alone, once the status that says so is written:
    # the drain is recorded as done but for the leader that ends itself.
    own = operator["metadata"]["name"]
    eventually(leaving(NAMESPACE, own), timeout=60, what="the operator's own pod evicted, last")
    self_s = time.monotonic() - written
    status = cluster.gpunode(NODE)["status"]
    assert status["phase"] == "Draining", status["phase"]
    assert status["drain"]["pending"] == [f"{NAMESPACE}/{own}"], status["drain"]

    # Its replacement cannot come back to the cordoned node; an operator elsewhere (here,
    # on the host) takes the Lease over and finishes: the drain is done, the rung begins.
    with (cluster.directory / "successor.log").open("wb") as log:
        successor = subprocess.Popen(
            [sys.executable, "-m", "pitcrew.cli", "operator", "--kubeconfig", cluster.kubeconfig,
             "--namespace", NAMESPACE, "--account-prefix", PREFIX, "--identity", "successor",
             "--resync-seconds", "2", "--metrics-port", "0", "--health-port", "0"],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        try:
            eventually(
                lambda: cluster.gpunode(NODE)["status"]["phase"] == "Remediating",
                timeout=120, what=f"{NODE} Remediating under the successor",
            )  # fmt: skip
        finally:
            successor.terminate()
            successor.wait(timeout=30)
    history = [h["to"] for h in cluster.gpunode(NODE)["status"].get("history") or []]
    assert history.count("Draining") == 1, history
    assert history.count("Remediating") == 1, history
    print(
        f"Xid in the kernel log to cordon {cordon_s:.1f}s, to the workload's eviction "
        f"{evict_s:.1f}s, to the operator's own {self_s:.1f}s, to Remediating under its "
        f"successor {time.monotonic() - written:.1f}s"
    )
