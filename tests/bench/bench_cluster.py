"""What every operator benchmark shares: the cluster, the pinning, the measuring.

- :class:`Bench` brings up a devcluster with Pitcrew the way the demo and the
  end-to-end tests do (:class:`~pitcrew.dev.stack.SimStack`), with a policy
  whose remediation goes nowhere (a webhook to a closed port), so a node taken
  out stays out and the benchmark measures detection and drain only.
- **Pinning.** On a machine of two or more cores, the operator runs alone on
  core 0 and everything else (etcd, the apiserver, the controllers, kwok, the
  simulated agents, the benchmark) on the others, so the operator's figures
  are its own and its CPU-seconds travel to other machines.
- :class:`Usage` reads the operator's CPU-seconds from ``/proc`` and its
  decisions from its own ``pitcrew_decisions_total``.
- :class:`CordonWatch` records when each node becomes unschedulable from a raw
  JSON Node watch (client models would delay the measurement itself).
- :func:`emit` prints a run's figures as a table and as one JSON line, with
  the machine's load.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from pitcrew.api.vocabulary import SIMULATED_LABEL
from pitcrew.dev import devcluster
from pitcrew.dev.devcluster.cluster import ClusterState
from pitcrew.dev.stack import SimStack
from pitcrew.kube.client import list_all

OPERATOR_CORE = 0
GPUNODES = "/apis/pitcrew.dev/v1alpha1/gpunodes"


def cores() -> set[int]:
    return os.sched_getaffinity(0)


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` onto ``cpus``; threads it starts later inherit it."""
    with contextlib.suppress(FileNotFoundError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), cpus)


class Bench:
    """A devcluster with Pitcrew installed, the operator started by :meth:`start`."""

    def __init__(
        self,
        directory: Path,
        nodes: int,
        *,
        pinned: bool = True,
        apiserver_flags: dict[str, str] | None = None,
        heartbeat_load: int = 1,
    ) -> None:
        started = time.monotonic()
        self.nodes = nodes
        self.heartbeat_load = heartbeat_load
        self.pinned = pinned and len(cores()) > 1
        self.rest = cores() - {OPERATOR_CORE} if self.pinned else cores()
        if self.pinned:
            os.sched_setaffinity(0, self.rest)  # the benchmark itself, and what it starts
        self._exit = contextlib.ExitStack()
        self.stack = self._exit.enter_context(
            SimStack.devcluster(
                directory=directory,
                nodes=nodes,
                timeout=max(900.0, nodes * 0.3),
                apiserver_flags=apiserver_flags,
                # The kubelets beat as a fleet ``heartbeat_load`` times larger would.
                beat=devcluster.heartbeats(heartbeat_load * nodes),
                log=lambda _: None,
            )
        )
        self.cluster_seconds = time.monotonic() - started
        print(f"devcluster with {nodes} nodes up in {self.cluster_seconds:.0f}s", flush=True)
        self.state = ClusterState.load(directory / "cluster")
        self.api = self.stack.api
        self.core = client.CoreV1Api(self.api)
        self.checks = {"interval": "30s", "heartbeat": "5m"}
        self.lease_seconds = 0

    def start(
        self,
        *,
        sim_agents: bool,
        interval: str = "30s",
        heartbeat: str = "5m",
        lease_seconds: int = 15,
    ) -> None:
        """The operator (alone on its core), and the simulated agents if asked for.

        One process plays every simulated agent: a pod and a token per node would
        be part of what is measured, so the agents write with admin credentials."""
        self.checks = {"interval": interval, "heartbeat": heartbeat}
        self.lease_seconds = lease_seconds
        if sim_agents:
            self.stack.start_sim_agents(
                interval=interval, heartbeat=heartbeat, metrics=False, agent_credentials=False
            )
        # The operator's own defaults (a 15 s Lease, a 15 s resync): the tests' 4 s
        # Lease is for fast fail-over tests, not for a loaded machine. A longer Lease
        # (``--lease-seconds``) keeps the leader on a machine so loaded by others that
        # its renewals are answered later than 15 s allows.
        operator = self.stack.start_operator("operator", resync="15", lease_seconds=lease_seconds)
        if self.pinned:
            pin(operator.pid, {OPERATOR_CORE})
            for process in self.state.processes if self.state else []:
                pin(process.pid, self.rest)

    @property
    def operator_pid(self) -> int:
        return self.stack.running["operator"].pid

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

    def gpunode_phases(self) -> dict[str, str]:
        return {
            g["metadata"]["name"]: (g.get("status") or {}).get("phase", "")
            for g in list_all(self.api, GPUNODES)
        }

    def wait_for(self, what: str, done: Callable[[], bool], timeout: float = 1800) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if done():
                    return
            except client.ApiException as error:  # a loaded apiserver: ask again
                print(f"waiting for {what}: {error.status} {error.reason}", flush=True)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not reached in {timeout:.0f}s")
            time.sleep(2)

    def wait_healthy(self, count: int, timeout: float = 1800) -> None:
        started = time.monotonic()
        self.wait_for(
            f"{count} GPUNodes Healthy",
            lambda: sum(p == "Healthy" for p in self.gpunode_phases().values()) >= count,
            timeout,
        )
        print(f"{count} GPUNodes Healthy after {time.monotonic() - started:.0f}s", flush=True)

    def close(self) -> None:
        self._exit.close()


def node_names(count: int) -> list[str]:
    return [f"gpu-node-{i:04d}" for i in range(count)]


def spread(names: list[str], count: int) -> list[str]:
    """``count`` of ``names``, evenly spaced (racks are consecutive names)."""
    step = max(1, len(names) // count)
    return names[::step][:count]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "p50": round(percentile(values, 50), 4),
        "p90": round(percentile(values, 90), 4),
        "p99": round(percentile(values, 99), 4),
        "max": round(max(values), 4),
    }


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def metric_sum(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )


@dataclass
class Usage:
    """The operator's CPU-seconds and decisions since :meth:`begin`."""

    bench: Bench
    cpu: float = 0.0
    decisions: float = 0.0

    def _now(self) -> tuple[float, float]:
        fields = Path(f"/proc/{self.bench.operator_pid}/stat").read_text().rsplit(")", 1)[1]
        ticks = fields.split()
        cpu = (int(ticks[11]) + int(ticks[12])) / os.sysconf("SC_CLK_TCK")
        port = self.bench.stack.metrics_port("operator")
        return cpu, metric_sum(scrape(port), "pitcrew_decisions_total")

    def begin(self) -> Usage:
        self.cpu, self.decisions = self._now()
        return self

    def since(self) -> dict[str, float]:
        cpu, decisions = self._now()
        return {"cpu_s": round(cpu - self.cpu, 3), "decisions": decisions - self.decisions}


def memory(pid: int) -> dict[str, float]:
    """Resident and peak resident MiB of ``pid``."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mib": fields["VmRSS"], "peak_rss_mib": fields["VmHWM"]}


class CordonWatch:
    """When each of ``targets`` became unschedulable (Unix seconds)."""

    def __init__(self, api: client.ApiClient, targets: Iterable[str]) -> None:
        self.core = client.CoreV1Api(api)
        self.targets = set(targets)
        self.cordoned: dict[str, float] = {}
        self.changed = threading.Condition()
        self._ready = threading.Event()
        threading.Thread(target=self._observe, daemon=True, name="bench-cordons").start()
        self._ready.wait()

    def _observe(self) -> None:
        listing = self.core.list_node(label_selector=SIMULATED_LABEL, limit=1)
        response = self.core.list_node(
            label_selector=SIMULATED_LABEL,
            watch=True,
            timeout_seconds=3600,
            resource_version=listing.metadata.resource_version,
            _preload_content=False,
        )
        self._ready.set()
        # The stream ends when the cluster goes down under it: nothing to record then.
        with contextlib.suppress(Exception):
            for line in response:
                node = json.loads(line)["object"]
                name = node["metadata"]["name"]
                if (
                    name in self.targets
                    and (node.get("spec") or {}).get("unschedulable")
                    and name not in self.cordoned
                ):
                    with self.changed:
                        self.cordoned[name] = time.time()
                        self.changed.notify_all()

    def wait(self, names: Iterable[str], timeout: float) -> bool:
        wanted = set(names)
        deadline = time.monotonic() + timeout
        with self.changed:
            while not wanted <= self.cordoned.keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True


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


def apiserver_status_writes(api: client.ApiClient) -> float:
    """GPUNode status applies counted by the apiserver."""
    return apiserver_metric(
        api,
        lambda line: (
            'resource="gpunodes"' in line
            and 'subresource="status"' in line
            and 'verb="APPLY"' in line
        ),
    )


def emit(scenario: str, figures: dict[str, Any], *, bench: Bench | None, as_json: bool) -> None:
    """The figures as ``name: value`` lines, then (``--json``) as one JSON line, each
    with the machine: cores, load average, whether the operator had its own core."""
    machine: dict[str, Any] = {
        "cores": os.cpu_count(),
        "load_1m_5m_15m": [round(x, 2) for x in os.getloadavg()],
    }
    if bench is not None:
        machine["operator_pinned_alone"] = bench.pinned
        machine["heartbeat_load"] = bench.heartbeat_load
        machine["operator_lease_s"] = bench.lease_seconds
        machine["devcluster_up_s"] = round(bench.cluster_seconds, 1)
        machine["control_plane_rss_mib"] = {
            process.name: memory(process.pid)["rss_mib"]
            for process in (bench.state.processes if bench.state else [])
            if Path(f"/proc/{process.pid}/status").exists()
        }
    record = {"scenario": scenario, **figures, "machine": machine}
    for key, value in record.items():
        print(f"  {key}: {value}")
    if as_json:
        print(json.dumps(record), flush=True)
