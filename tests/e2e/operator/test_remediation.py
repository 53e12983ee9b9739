"""Remediators against real peers: a Redfish BMC (sushy-tools), a webhook receiver,
Cluster API Machines; and the ladder's escalation to retirement."""

from __future__ import annotations

import base64
import http.server
import json
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client, utils

from pitcrew.deploy import rbac
from pitcrew.dev import devcluster
from pitcrew.dev.devcluster.cluster import free_port
from pitcrew.kube.client import api_client
from support.fixtures import HealthyFleet
from support.fleet import NAMESPACE, Fleet, crd, eventually

FATAL_XID = [{"type": "xid", "gpu": 4, "code": 79}]
SYSTEM_UUID = "8f0e3b52-1c1f-4b1e-9f7e-5f2a8b8d0a01"
ROGUE_ANNOTATIONS = {
    # A tenant's server (TEST-NET-3): a reset sent there would never reach the emulator.
    "pitcrew.dev/bmc-endpoint": "https://203.0.113.9:8443",
    "pitcrew.dev/bmc-system": "/redfish/v1/Systems/1",
}


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[str]:
    """The sushy-tools Redfish emulator (fake driver) with one powered-on system."""
    port = free_port()
    config = tmp_path / "emulator.conf"
    config.write_text(
        "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = [{{'uuid': '{SYSTEM_UUID}', 'name': 'gpu-node', "
        "'power_state': 'On', 'nics': []}]\n"
    )
    log = (tmp_path / "emulator.log").open("wb")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "sushy-emulator"),
            "--config",
            str(config),
            "--interface",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/redfish/v1/Systems", timeout=1):
                return True
        except OSError:
            return False

    try:
        eventually(up, timeout=30, what="sushy-emulator up")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def system_power(url: str) -> str:
    with urllib.request.urlopen(f"{url}/redfish/v1/Systems/{SYSTEM_UUID}", timeout=5) as answer:
        return str(json.load(answer)["PowerState"])


def _secret(core: client.CoreV1Api, name: str, data: dict[str, str]) -> None:
    core.create_namespaced_secret(
        NAMESPACE,
        {
            "metadata": {"name": name},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        },
    )


CREDENTIALS = {"username": "admin", "password": "password"}


def reset_reached_the_bmc(fleet: Fleet, node: str, log: Path) -> client.CoreV1Event:
    """The reset in the emulator's request log, and the operator's RemediationStarted
    Event. The BMC's own log is the evidence that the reset reached it (its power
    state is Off only for an instant, which polling may well miss)."""
    eventually(
        lambda: (
            f"POST /redfish/v1/Systems/{SYSTEM_UUID}/Actions/ComputerSystem.Reset"
            in log.read_text(errors="replace")
        ),
        timeout=30,
        what="the reset request at the BMC",
    )
    started: client.CoreV1Event = eventually(
        lambda: next((e for e in fleet.events(node) if e.reason == "RemediationStarted"), None),
        timeout=30,
        what="RemediationStarted event",
    )
    return started


def test_redfish_reboot_reaches_the_bmc_named_by_the_inventory(
    fleet_factory: type[Fleet], bmc: str, core: client.CoreV1Api, tmp_path: Path
) -> None:
    fleet = fleet_factory(size=2)
    node = fleet.nodes[0]
    _secret(core, "bmc-credentials", CREDENTIALS)
    system = f"/redfish/v1/Systems/{SYSTEM_UUID}"
    _secret(core, "bmc-inventory", {node: json.dumps({"endpoint": bmc, "system": system})})
    try:
        fleet.policy(
            remediation={
                "ladders": {"fatal": [{"action": "reboot", "timeout": "10m"}]},
                "redfish": {
                    "credentialsSecret": {"name": "bmc-credentials"},
                    "inventorySecret": {"name": "bmc-inventory"},
                },
            }
        )
        fleet.wait_phase(node, "Healthy")
        assert system_power(bmc) == "On"
        fleet.inject(node, FATAL_XID)
        started = reset_reached_the_bmc(fleet, node, tmp_path / "emulator.log")
        assert "Redfish ForceRestart" in started.message
        assert "BMC from the inventory" in started.message
        fleet.wait_phase(node, "Healthy", timeout=90)
    finally:
        core.delete_namespaced_secret("bmc-credentials", NAMESPACE)
        core.delete_namespaced_secret("bmc-inventory", NAMESPACE)


class Recorder(http.server.BaseHTTPRequestHandler):
    """A server of the tenant's: it records every request, credentials included."""

    seen: list[str] = []

    def _record(self) -> None:
        Recorder.seen.append(f"{self.command} {self.path} {self.headers.get('Authorization')}")
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:
        self._record()

    def do_POST(self) -> None:
        self._record()

    def log_message(self, *args: object) -> None:
        """Quiet."""


def test_a_rogue_bmc_annotation_gets_no_request_and_the_event_says_why(
    fleet_factory: type[Fleet], core: client.CoreV1Api, kubeconfig: str
) -> None:
    # Root on the node uses its kubelet's identity to annotate its own Node with a
    # server it owns: a reboot must send neither a request nor the fleet's BMC
    # credentials there.
    Recorder.seen = []
    rogue = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=rogue.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{rogue.server_address[1]}"
    fleet = fleet_factory(size=2)
    node = fleet.nodes[0]
    _secret(core, "bmc-credentials", CREDENTIALS)
    kubelet = client.CoreV1Api(
        api_client(str(devcluster.node_kubeconfig(directory=Path(kubeconfig).parent, node=node)))
    )
    try:
        kubelet.patch_node(
            node,
            {
                "metadata": {
                    "annotations": {
                        "pitcrew.dev/bmc-endpoint": endpoint,
                        "pitcrew.dev/bmc-system": "/redfish/v1/Systems/1",
                    }
                }
            },
        )
        fleet.policy(
            remediation={
                "ladders": {"fatal": [{"action": "reboot", "timeout": "10m"}]},
                "redfish": {"credentialsSecret": {"name": "bmc-credentials"}},
            }
        )
        fleet.wait_phase(node, "Healthy")
        fleet.inject(node, FATAL_XID)
        refused = eventually(
            lambda: next((e for e in fleet.events(node) if e.reason == "RemediationFailed"), None),
            timeout=60,
            what="RemediationFailed event",
        )
        assert "not trusted" in refused.message
        assert "no request was sent" in refused.message
        assert endpoint in refused.message
        # The node is not rebooted through the rogue endpoint: the ladder goes on.
        time.sleep(2)
        assert Recorder.seen == []
    finally:
        rogue.shutdown()
        core.delete_namespaced_secret("bmc-credentials", NAMESPACE)


class Receiver(http.server.BaseHTTPRequestHandler):
    """A remediation webhook that fails twice with 503, then accepts."""

    requests: list[tuple[str, dict[str, Any]]] = []
    failures_left = 2

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Receiver.requests.append((self.headers["Idempotency-Key"], body))
        if Receiver.failures_left > 0:
            Receiver.failures_left -= 1
            self.send_response(503)
        else:
            self.send_response(202)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.requests, Receiver.failures_left = [], 2
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/rma"
    server.shutdown()


def test_webhook_is_retried_on_5xx_and_not_duplicated(
    healthy_fleet: HealthyFleet, receiver: str
) -> None:
    fleet = healthy_fleet(
        size=2,
        remediation={
            "ladders": {"fatal": [{"action": "webhook", "timeout": "1h"}]},
            "webhook": {"url": receiver},
        },
    )
    node = fleet.nodes[0]
    fleet.core.patch_node(
        node, {"metadata": {"annotations": {"sim.pitcrew.dev/repair-fails": "webhook"}}}
    )  # the ticket stays open
    fleet.inject(node, FATAL_XID)
    eventually(lambda: len(Receiver.requests) >= 3, timeout=30, what="webhook accepted")
    time.sleep(5)  # reconcile rounds and resyncs must not call it again
    keys = [key for key, _ in Receiver.requests]
    assert len(keys) == 3
    assert len(set(keys)) == 1
    payload = Receiver.requests[-1][1]
    assert payload["node"] == node
    assert payload["action"] == "webhook"
    assert payload["faultClass"] == "fatal"
    assert payload["gpus"] == [4]
    assert fleet.phase(node) == "Remediating"


def test_cluster_api_annotates_the_machine_whose_node_ref_is_the_node(
    fleet_factory: type[Fleet], kubeconfig: str
) -> None:
    # Root on the node uses its kubelet's identity to point its Node's Cluster API
    # annotations at the control-plane Machine: only the Machine whose status.nodeRef
    # is this Node (name and uid) is asked to remediate.
    fleet = fleet_factory(size=2)
    crd(fleet.api, "cluster.x-k8s.io", "v1beta1", "Machine")
    custom = fleet.custom
    node = fleet.nodes[0]
    uid = fleet.core.read_node(node).metadata.uid
    machines = {
        "cp-0": {"name": "cp-node-0", "uid": str(uuid.uuid4())},
        "md-gpu": {"name": node, "uid": uid},
        # An earlier Node of the same name, replaced since: not this Node.
        "md-gpu-old": {"name": node, "uid": str(uuid.uuid4())},
    }
    for name, ref in machines.items():
        custom.create_namespaced_custom_object(
            "cluster.x-k8s.io",
            "v1beta1",
            "default",
            "machines",
            {
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "Machine",
                "metadata": {"name": name},
                "status": {"nodeRef": {"apiVersion": "v1", "kind": "Node", **ref}},
            },
        )
    fleet.core.patch_node(
        node, {"metadata": {"annotations": {"sim.pitcrew.dev/repair-fails": "cluster-api"}}}
    )
    kubelet = client.CoreV1Api(
        api_client(str(devcluster.node_kubeconfig(directory=Path(kubeconfig).parent, node=node)))
    )
    kubelet.patch_node(
        node,
        {
            "metadata": {
                "annotations": {
                    "cluster.x-k8s.io/machine": "cp-0",
                    "cluster.x-k8s.io/cluster-namespace": "default",
                }
            }
        },
    )

    def remediate_key(name: str) -> str | None:
        machine = custom.get_namespaced_custom_object(
            "cluster.x-k8s.io", "v1beta1", "default", "machines", name
        )
        annotations: dict[str, str] = machine["metadata"].get("annotations") or {}
        return annotations.get("cluster.x-k8s.io/remediate-machine")

    fleet.policy(remediation={"ladders": {"fatal": [{"action": "cluster-api", "timeout": "1h"}]}})
    fleet.wait_phase(node, "Healthy")
    fleet.inject(node, FATAL_XID)
    key = eventually(lambda: remediate_key("md-gpu"), timeout=30, what="Machine annotated")
    assert key == fleet.gpunode(node)["status"]["remediation"]["reference"]
    assert remediate_key("cp-0") is None
    assert remediate_key("md-gpu-old") is None


BARE_METAL_HOST = {
    # metal3.io/v1alpha1 BareMetalHost, trimmed to spec.bmc (what Pitcrew reads).
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "bmc": {
                    "type": "object",
                    "required": ["address", "credentialsName"],
                    "properties": {
                        "address": {"type": "string"},
                        "credentialsName": {"type": "string"},
                        "disableCertificateVerification": {"type": "boolean"},
                    },
                }
            },
        }
    },
}


def test_redfish_reboot_reaches_the_bmc_a_bare_metal_host_names(
    fleet_factory: type[Fleet],
    bmc: str,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    tmp_path: Path,
) -> None:
    """Metal3 as the BMC source: the BareMetalHost labelled for the node names the BMC
    (in Metal3's own URL form) and its credential Secret; the operator reads that
    Secret with the Role the chart renders for the hosts' namespace. The node's own
    annotation, naming a tenant's server, is not read."""
    crd(api_client, "metal3.io", "v1alpha1", "BareMetalHost", BARE_METAL_HOST)
    hosts = f"metal3-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": hosts}})
    for obj in rbac.metal3_manifests(hosts, NAMESPACE):
        utils.create_from_dict(api_client, obj)
    core.create_namespaced_secret(
        hosts,
        {
            "metadata": {"name": "rack7-bmc"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in CREDENTIALS.items()},
        },
    )
    fleet = fleet_factory(size=2)
    node = fleet.nodes[0]
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "metal3.io",
        "v1alpha1",
        hosts,
        "baremetalhosts",
        {
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": "rack7-u12", "labels": {"pitcrew.dev/node": node}},
            "spec": {
                "online": True,
                "bmc": {
                    "address": f"redfish+http://{urlsplit(bmc).netloc}"
                    f"/redfish/v1/Systems/{SYSTEM_UUID}",
                    "credentialsName": "rack7-bmc",
                },
            },
        },
    )
    fleet.core.patch_node(node, {"metadata": {"annotations": ROGUE_ANNOTATIONS}})
    try:
        fleet.policy(
            remediation={
                "ladders": {"fatal": [{"action": "reboot", "timeout": "10m"}]},
                "redfish": {"metal3": {"enabled": True, "namespace": hosts}},
            }
        )
        fleet.wait_phase(node, "Healthy")
        fleet.inject(node, FATAL_XID)
        started = reset_reached_the_bmc(fleet, node, tmp_path / "emulator.log")
        assert f"BMC from the BareMetalHost {hosts}/rack7-u12" in started.message
        fleet.wait_phase(node, "Healthy", timeout=90)
    finally:
        core.delete_namespace(hosts)


def test_failed_repairs_climb_the_ladder_then_retire(healthy_fleet: HealthyFleet) -> None:
    fleet = healthy_fleet(
        size=2,
        remediation={
            "ladders": {
                "fatal": [
                    {"action": "reset-gpu", "timeout": "2s", "attempts": 2},
                    {"action": "webhook", "timeout": "2s"},
                    {"action": "retire"},
                ]
            },
            "webhook": {"url": "http://127.0.0.1:9/closed"},
            "lemon": {"maxRemediations": 10},
        },
    )
    node = fleet.nodes[0]
    fleet.core.patch_node(
        node, {"metadata": {"annotations": {"sim.pitcrew.dev/repair-fails": "reset-gpu"}}}
    )
    fleet.inject(node, FATAL_XID)
    retired = fleet.wait_phase(node, "Retired", timeout=60)
    assert retired["status"]["reason"] == "LadderRetire"
    assert fleet.taints(node)["pitcrew.dev/retired"] == "LadderRetire"
    assert fleet.node(node).spec.unschedulable
    eventually(
        lambda: [e.reason for e in fleet.events(node)].count("RemediationTimedOut") >= 2,
        what="two timed-out rungs recorded",
    )
    eventually(
        lambda: "RemediationFailed" in {e.reason for e in fleet.events(node)},
        what="the closed webhook port reported",
    )
    resets = client.BatchV1Api(fleet.api).list_namespaced_job(
        NAMESPACE, label_selector=f"pitcrew.dev/node={node},pitcrew.dev/remediation=reset-gpu"
    )
    assert len(resets.items) == 2


def test_the_reset_job_waits_for_the_agent_to_release_nvml(healthy_fleet: HealthyFleet) -> None:
    """``nvidia-smi -r`` is refused while the agent holds NVML: the operator records the
    reset rung, the node's agent (the real AgentCore) closes NVML and says so in its
    GPUNode status, and only then is the reset Job created; after the repair the agent
    opens NVML again and its clean report takes the node back through validation."""
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    fleet.inject(node, FATAL_XID)
    started = eventually(
        lambda: next((e for e in fleet.events(node) if e.reason == "RemediationStarted"), None),
        timeout=60,
        what="the reset Job started",
    )
    assert "the agent released the GPUs" in started.message  # not the wait running out
    (requested,) = [e for e in fleet.events(node) if e.reason == "ReleaseRequested"]
    assert requested.first_timestamp <= started.first_timestamp
    (job,) = (
        client.BatchV1Api(fleet.api)
        .list_namespaced_job(
            NAMESPACE, label_selector=f"pitcrew.dev/node={node},pitcrew.dev/remediation=reset-gpu"
        )
        .items
    )
    assert job.metadata.name in started.message
    fleet.wait_phase(node, "Healthy", timeout=90)
    # The agent sweeps again after the reset: its report carries the repair, no release.
    checks = fleet.gpunode(node)["status"]["checks"]
    assert checks.get("released", "") == ""
    assert checks["repair"] == job.metadata.name
