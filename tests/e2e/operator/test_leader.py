"""One replica acts for each pool: another takes a pool over mid-drain without
repeating work, and a replica that loses a Lease stops acting for it at once."""

from __future__ import annotations

import datetime
import http.server
import os
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client

from pitcrew.core.lease import pool_lease
from pitcrew.dev import devcluster
from pitcrew.dev.stack import SimStack
from support.fixtures import HealthyFleet
from support.fleet import NAMESPACE, eventually
from support.operator_metrics import process_samples

FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
CLUSTER = "pitcrew-operator"


def holder(api: client.ApiClient, lease: str = CLUSTER) -> str:
    """Who holds ``lease`` (the cluster shard's by default); "" while no one does."""
    try:
        found = client.CoordinationV1Api(api).read_namespaced_lease(lease, NAMESPACE)
    except client.ApiException as error:
        if error.status == 404:
            return ""
        raise
    return str(found.spec.holder_identity or "")


def test_standby_finishes_the_drain_after_the_leader_dies(
    healthy_fleet: HealthyFleet,
    workload_namespace: str,
    pitcrew: SimStack,
    api_client: client.ApiClient,
) -> None:
    for name in ("operator-a", "operator-b"):
        if name not in pitcrew.running or pitcrew.running[name].poll() is not None:
            pitcrew.running.pop(name, None)
            pitcrew.start_operator(name)
    fleet = healthy_fleet(size=2)
    node = fleet.nodes[0]
    labels = {"app": "guarded"}
    fleet.pod(workload_namespace, "guarded-0", node, labels=labels, gpus=4)
    fleet.pod(workload_namespace, "free-0", node, gpus=4)
    budget = client.PolicyV1Api(api_client)
    budget.create_namespaced_pod_disruption_budget(
        workload_namespace,
        {
            "metadata": {"name": "guarded"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}},
        },
    )
    fleet.inject(node, FATAL_XID)
    fleet.wait_phase(node, "Draining", timeout=20)
    eventually(
        lambda: not fleet.pod_exists(workload_namespace, "free-0"), what="the unguarded pod evicted"
    )
    # Events are posted in batches a moment after the action (kube/events.py): the
    # leader is killed once its eviction is said, so that the Events show whether the
    # standby evicts the same pod again.
    eventually(
        lambda: any("free-0" in e.message for e in fleet.events(node) if e.reason == "Evicted"),
        what="the eviction's Event",
    )
    pool = pool_lease(CLUSTER, fleet.group)
    leader = holder(api_client, pool)
    other = "operator-b" if leader == "operator-a" else "operator-a"
    pitcrew.kill(leader)  # SIGKILL mid-drain: no goodbye, no lease release
    eventually(
        lambda: holder(api_client, pool) == other, timeout=30, what=f"{other} takes the pool"
    )
    assert fleet.phase(node) == "Draining"
    budget.delete_namespaced_pod_disruption_budget("guarded", workload_namespace)
    fleet.wait_phase(node, "Healthy", timeout=90)
    time.sleep(3)
    evicted = [e for e in fleet.events(node) if e.reason == "Evicted"]
    evicted_pods = [p for e in evicted for p in e.message.split(": ", 1)[1].split(", ")]
    assert sorted(evicted_pods) == sorted(
        [f"{workload_namespace}/free-0", f"{workload_namespace}/guarded-0"]
    )
    assert all((e.count or 1) == 1 for e in evicted)
    resets = client.BatchV1Api(api_client).list_namespaced_job(
        NAMESPACE, label_selector=f"pitcrew.dev/node={node},pitcrew.dev/remediation=reset-gpu"
    )
    assert len(resets.items) == 1
    assert fleet.history(node).count("Remediating") == 1
    assert pitcrew.running[other].poll() is None
    pitcrew.start_operator(leader)


def test_a_replica_that_loses_a_lease_stops_acting_for_it_and_goes_on(
    pitcrew: SimStack, api_client: client.ApiClient
) -> None:
    leases = client.CoordinationV1Api(api_client)
    eventually(lambda: holder(api_client) in pitcrew.running, what="a running leader")
    leader = holder(api_client)
    process = pitcrew.running[leader]
    for name in [n for n in pitcrew.running if n.startswith("operator") and n != leader]:
        pitcrew.kill(name)  # no other replica may take the lease back
    eventually(lambda: cluster_leader(pitcrew, leader) == 1.0, what="the leader says it leads")
    lease = leases.read_namespaced_lease(CLUSTER, NAMESPACE)
    lease.spec.holder_identity = "intruder"
    lease.spec.lease_duration_seconds = 3600
    lease.spec.renew_time = datetime.datetime.now(datetime.UTC)
    leases.replace_namespaced_lease(CLUSTER, NAMESPACE, lease)
    eventually(
        lambda: cluster_leader(pitcrew, leader) == 0.0, timeout=10, what="the leader to stop"
    )
    assert process.poll() is None  # its other shards go on
    assert "lost the Lease" in pitcrew.log(leader)
    lease = leases.read_namespaced_lease(CLUSTER, NAMESPACE)
    lease.spec.lease_duration_seconds = 1
    leases.replace_namespaced_lease(CLUSTER, NAMESPACE, lease)
    eventually(lambda: holder(api_client) == leader, timeout=30, what=f"{leader} leads again")
    if leader != "operator-a":
        pitcrew.start_operator("operator-a")


def cluster_leader(pitcrew: SimStack, name: str) -> float | None:
    """The process's ``pitcrew_leader`` gauge: 1 while it holds the cluster shard."""
    found = [s.value for s in process_samples(pitcrew, name) if s.name == "pitcrew_leader"]
    return found[0] if found else None


class Counter(http.server.BaseHTTPRequestHandler):
    """A remediation webhook that accepts and counts every request, by idempotency key."""

    requests: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        Counter.requests.append(self.headers["Idempotency-Key"])
        self.send_response(202)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        """Quiet."""


def test_an_apiserver_restart_under_two_replicas_never_leaves_two_leaders_acting(
    healthy_fleet: HealthyFleet, pitcrew: SimStack, kubeconfig: str, api_client: client.ApiClient
) -> None:
    if os.environ.get("PITCREW_TEST_KUBECONFIG"):
        pytest.skip("restarts the devcluster's own kube-apiserver")
    Counter.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    operators = ("operator-a", "operator-b")
    for name in operators:
        if name not in pitcrew.running or pitcrew.running[name].poll() is not None:
            pitcrew.running.pop(name, None)
            pitcrew.start_operator(name)
    try:
        fleet = healthy_fleet(
            size=2,
            remediation={
                "ladders": {"fatal": [{"action": "webhook", "timeout": "1h"}]},
                "webhook": {"url": f"http://127.0.0.1:{server.server_address[1]}/rma"},
            },
        )
        node = fleet.nodes[0]
        fleet.core.patch_node(
            node, {"metadata": {"annotations": {"sim.pitcrew.dev/repair-fails": "webhook"}}}
        )
        devcluster.restart(directory=Path(kubeconfig).parent, component="kube-apiserver")
        # As Kubernetes would: an operator that exited is started again.
        time.sleep(6)
        for name in operators:
            if pitcrew.running[name].poll() is not None:
                pitcrew.running.pop(name)
                pitcrew.start_operator(name)
        eventually(lambda: holder(api_client) in operators, timeout=60, what="a leader again")
        fleet.inject(node, FATAL_XID)
        eventually(lambda: Counter.requests, timeout=60, what="the webhook called")
        time.sleep(8)  # rounds and resyncs of both replicas
        assert len(Counter.requests) == 1, Counter.requests  # one leader acted, once
        assert fleet.phase(node) == "Remediating"
    finally:
        server.shutdown()
