"""Run the demo: devcluster, simulated agents, the operator, a training job, faults.

Everything it starts (the control plane, the simulated agents, the operator)
is stopped on the way out, on Ctrl-C and on errors alike. The stack is brought
up by :class:`pitcrew.dev.stack.SimStack`, as the e2e tests and the benchmarks
bring it up: the operator runs as its own process with the RBAC the chart
ships; the demo only injects faults and plays the training job.
"""

from __future__ import annotations

import bisect
import datetime
import json
import logging
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.live import Live

from pitcrew.api.gpunode import Phase
from pitcrew.api.meta import GROUP, VERSION
from pitcrew.api.vocabulary import FAULTS_ANNOTATION, OPERATOR_COMPONENT, SIMULATED_LABEL
from pitcrew.core.convert import EPOCH, parse_time
from pitcrew.dev.demo.scenario import HANG, ScheduledFault, schedule
from pitcrew.dev.demo.simulated import DAYS, SimulatedGain, simulate_gain
from pitcrew.dev.demo.view import InjectedFault, Snapshot, render, summary
from pitcrew.dev.demo.workload import NAMESPACE, TrainingJob
from pitcrew.dev.stack import SimStack
from pitcrew.kube.client import request

logger = logging.getLogger(__name__)
IN_SERVICE = ("Healthy", "Spare")
TRAIN_TICK_S = 0.1
STEPS_PER_SECOND = 2.0
"""The demo job's step rate: a fault every few seconds needs steps well under one."""
ACTIONS_KEPT = 100


@dataclass(frozen=True)
class DemoOptions:
    nodes: int = 32
    seed: int = 7
    speed: float = 1.0
    duration: float | None = None
    directory: Path = Path(".devcluster-demo")
    spares: int = 2
    checkpoint_aware: bool = True
    straggler_at: float | None = 60.0
    """When one of the job's nodes becomes its straggler (``slow-gemm``); None: never."""
    hang_at: float | None = 90.0
    """When one rank of the job stops for good, its pods running; None: never."""


def policy(options: DemoOptions) -> dict[str, Any]:
    """The demo's policy: the example policy's shape, with minutes scaled to seconds."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUHealthPolicy",
        "metadata": {"name": "demo-fleet"},
        "spec": {
            "nodeSelector": {"matchLabels": {SIMULATED_LABEL: "true"}},
            "checks": {"interval": "2s", "heartbeat": "30s"},
            "validation": {"burnInOnJoin": False, "burnInAfterRepair": True, "timeout": "2m"},
            "remediation": {
                "ladders": {
                    "fatal": [
                        {"action": "reset-gpu", "timeout": "1m", "attempts": 2},
                        {"action": "retire"},
                    ],
                    "degraded": [{"action": "reset-gpu", "timeout": "1m"}, {"action": "retire"}],
                },
                "lemon": {"maxRemediations": 3, "window": "1h"},
            },
            "safety": {
                "maxUnhealthy": "25%",
                "maxConcurrentDrains": 4,
                "maxConcurrentRemediations": 4,
                "stormCooldown": "30s",
                "drain": {
                    "timeout": "1m",
                    "onTimeout": "force",
                    "checkpointMaxDelay": "45s" if options.checkpoint_aware else "1s",
                },
            },
            "spares": {"count": options.spares},
            "stragglers": {"slowerThanMedianPercent": 20, "consecutiveReports": 3},
        },
    }


class Demo:
    def __init__(self, options: DemoOptions, console: Console) -> None:
        self.options = options
        self.console = console
        self.started = time.monotonic()
        self.faults: list[InjectedFault] = []
        self.actions: list[str] = []
        self.timeline: list[tuple[datetime.datetime, int, str]] = []
        """Pitcrew's actions by the time of their Event (the seen count breaks ties)."""
        self.seen_events: set[str] = set()
        self.metrics_port = 0
        self.phases: dict[str, Phase] = {}
        self.mfu: list[tuple[float, float]] = []
        """The job's MFU as the operator measures it, once a second: (elapsed, ratio)."""

    def run(self) -> Snapshot:
        directory = self.options.directory.resolve()
        self.console.print(
            f"[bold]Starting devcluster with {self.options.nodes} simulated GPU nodes[/] "
            f"in {directory}"
        )
        with SimStack.devcluster(
            directory=directory,
            nodes=self.options.nodes,
            log=lambda line: self.console.print(f"  {line}"),
        ) as stack:
            api = stack.api
            client.CustomObjectsApi(api).create_cluster_custom_object(
                GROUP, VERSION, "gpuhealthpolicies", policy(self.options)
            )
            stack.start_sim_agents(interval="2s", heartbeat="30s", metrics=False)
            stack.start_operator("operator", resync="5")
            self.metrics_port = stack.metrics_port("operator")
            self.console.print(
                "Operator and simulated agents started; waiting for the fleet to be admitted..."
            )
            try:
                self._wait_admitted(api)
                size = max(
                    1, self.options.nodes - self.options.spares - max(2, self.options.nodes // 8)
                )
                job = TrainingJob(
                    api,
                    name="llm-pretrain",
                    size=size,
                    steps_per_second=STEPS_PER_SECOND,
                    checkpoint_every=20,
                    seed=self.options.seed,
                )
                job.start()
                return self._loop(api, stack.kubeconfig, job)
            finally:
                self.console.print("Stopping the operator, the simulated agents and devcluster.")

    def _wait_admitted(self, api: client.ApiClient) -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            phases = self._phases(api)
            admitted = sum(1 for p in phases.values() if p in (Phase.HEALTHY, Phase.SPARE))
            if admitted >= self.options.nodes:
                return
            time.sleep(1)
        raise RuntimeError("the fleet was not admitted within 5 minutes; see operator.log")

    def _loop(self, api: client.ApiClient, kubeconfig: str, job: TrainingJob) -> Snapshot:
        duration = self.options.duration
        horizon = duration if duration is not None else 24 * 3600
        pending = schedule(
            seed=self.options.seed,
            duration=horizon,
            mean_interval=60 / self.options.speed,
            straggler_at=self.options.straggler_at,
            hang_at=self.options.hang_at,
        )
        start = time.monotonic()
        stop = threading.Event()
        watcher = threading.Thread(
            target=self._watch_phases, args=(api, start, stop), daemon=True, name="demo-phases"
        )
        watcher.start()
        trainer = threading.Thread(
            target=self._train, args=(job, stop), daemon=True, name="demo-training"
        )
        trainer.start()
        threading.Thread(
            target=job.watch_slowdown, args=(stop,), daemon=True, name="demo-slowdown"
        ).start()
        snapshot = self._snapshot(api, kubeconfig, job, 0.0)
        try:
            with Live(render(snapshot), console=self.console, refresh_per_second=2) as live:
                while duration is None or time.monotonic() - start < duration:
                    time.sleep(1)
                    elapsed = time.monotonic() - start
                    while pending and pending[0].at <= elapsed:
                        self._inject(api, job, pending.pop(0), elapsed)
                    snapshot = self._snapshot(api, kubeconfig, job, elapsed)
                    live.update(render(snapshot))
        finally:
            stop.set()
        self.console.print()
        self.console.print(summary(snapshot, simulated=self._simulated(job)))
        return snapshot

    def _simulated(self, job: TrainingJob) -> SimulatedGain | None:
        """What Pitcrew adds to a stock cluster of this size, which the demo cannot run
        beside itself: the goodput simulator's answer (about a second at 32 nodes)."""
        self.console.print(
            f"Simulating this fleet for {DAYS:g} days, on a stock cluster and with "
            "Pitcrew (pitcrew simulate)...",
            highlight=False,
        )
        try:
            return simulate_gain(
                nodes=self.options.nodes,
                job_nodes=job.size,
                spares=self.options.spares,
                seed=self.options.seed,
            )
        except ValueError as error:  # a pool too small for the job and its spares
            self.console.print(f"No simulated comparison: {error}", highlight=False)
            return None

    @staticmethod
    def _train(job: TrainingJob, stop: threading.Event) -> None:
        """The training loop, ticked finely (a tenth of a second, a fifth of a step), so
        the steps it counts as lost are the steps it lost."""
        last = time.monotonic()
        while not stop.wait(TRAIN_TICK_S):
            now = time.monotonic()
            try:
                job.tick(now - last)
            except client.ApiException as error:
                logger.warning("training job tick failed (%s); retried", error.reason)
            last = now

    def _watch_phases(self, api: client.ApiClient, start: float, stop: threading.Event) -> None:
        """Poll the GPUNodes four times a second: when did each faulty node leave service?
        (The simulated repairs are quick: a node can be back within seconds.)"""
        while not stop.wait(0.25):
            try:
                self.phases = self._phases(api)
            except client.ApiException:
                continue
            elapsed = time.monotonic() - start
            for fault in list(self.faults):
                phase = self.phases.get(fault.node, Phase.HEALTHY)
                if fault.cordoned_after is None and phase not in (Phase.HEALTHY, Phase.SPARE):
                    fault.cordoned_after = max(0.0, elapsed - fault.at)

    def _inject(
        self, api: client.ApiClient, job: TrainingJob, planned: ScheduledFault, elapsed: float
    ) -> None:
        core = client.CoreV1Api(api)
        if planned.category == HANG:
            stopped = job.hang()
            if stopped is not None:
                rank, node = stopped
                what = f"rank {rank} froze, the job's pods running"
                self.faults.append(InjectedFault(elapsed, node, HANG, what))
            return
        if planned.fault is None:
            job.crash()
            self.faults.append(
                InjectedFault(elapsed, "-", planned.category, "training job crashed")
            )
            return
        pods = request(api, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods").get("items", [])
        busy = sorted(
            {
                p["spec"]["nodeName"]
                for p in pods
                if p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running"
            }
        )
        if not busy:
            return
        node = busy[int(planned.pick * len(busy))]
        core.patch_node(
            node, {"metadata": {"annotations": {FAULTS_ANNOTATION: json.dumps([planned.fault])}}}
        )
        description = " ".join(f"{k}={v}" for k, v in planned.fault.items())
        self.faults.append(InjectedFault(elapsed, node, planned.category, description))

    def _phases(self, api: client.ApiClient) -> dict[str, Phase]:
        found = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, "gpunodes")
        return {
            g["metadata"]["name"]: Phase((g.get("status") or {}).get("phase") or "Pending")
            for g in found["items"]  # type: ignore[index]
        }

    def _events(self, api: client.ApiClient) -> None:
        """Pitcrew's Events on Nodes, in the order they happened: an Event listed late
        (the recorder posts from a thread) is placed by its time, not by when it was
        seen."""
        events = request(api, "GET", "/api/v1/namespaces/default/events").get("items", [])
        for event in events:
            if event.get("reportingComponent") != OPERATOR_COMPONENT:
                continue
            if event["involvedObject"].get("kind") != "Node":
                continue
            key = f"{event['metadata']['name']}/{event.get('count')}"
            if key in self.seen_events:
                continue
            self.seen_events.add(key)
            when = parse_time(event.get("lastTimestamp") or event.get("eventTime")) or EPOCH
            node = event["involvedObject"]["name"]
            text = f"{node}: {event['reason']}: {event['message']}"[:160]
            bisect.insort(self.timeline, (when, len(self.seen_events), text))
        del self.timeline[:-ACTIONS_KEPT]  # the screen shows the last ten; a day stays small
        self.actions = [text for _, _, text in self.timeline]

    def _metrics(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return {}
        samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = (
                    sample.value
                )
        return samples

    def _snapshot(
        self, api: client.ApiClient, kubeconfig: str, job: TrainingJob, elapsed: float
    ) -> Snapshot:
        phases = self.phases or self._phases(api)
        self._events(api)
        metrics = self._metrics()
        gpu = metrics.get("pitcrew_gpu_seconds_total", {})
        total = sum(gpu.values())
        up = sum(v for k, v in gpu.items() if dict(k).get("phase") in IN_SERVICE)
        job_seconds = metrics.get("pitcrew_job_seconds_total", {})
        job_total = sum(job_seconds.values())
        productive = sum(
            v for k, v in job_seconds.items() if dict(k).get("category") == "productive"
        )
        wasted = sum(v for k, v in job_seconds.items() if dict(k).get("category") == "wasted")
        interruptions = sum(metrics.get("pitcrew_job_interruptions_total", {}).values())
        mfu = next(iter(metrics.get("pitcrew_job_mfu_ratio", {}).values()), None)
        if mfu is not None:
            self.mfu.append((elapsed, mfu))
        remediations = sum(
            v
            for k, v in metrics.get("pitcrew_remediations_total", {}).items()
            if dict(k).get("result") == "started"
        )
        return Snapshot(
            elapsed=elapsed,
            seed=self.options.seed,
            phases=phases,
            job_step=job.state.step,
            job_checkpoint=job.state.checkpoint_step,
            job_running=job.state.running,
            job_size=job.size,
            job_restarts=job.state.restarts,
            hang_restarted_after=job.state.hang_restarted_after,
            job_lost_steps=job.state.lost_steps,
            step_seconds=1 / job.steps_per_second,
            job_interruptions=int(interruptions),
            job_wasted_seconds=wasted,
            job_seconds={dict(k)["category"]: v for k, v in job_seconds.items()},
            fleet_goodput=up / total if total else None,
            job_goodput=productive / job_total if job_total else None,
            job_mfu=mfu,
            mfu_samples=self.mfu,
            remediations=int(remediations),
            actions=self.actions,
            faults=self.faults,
            metrics_url=f"http://127.0.0.1:{self.metrics_port}/metrics",
            kubeconfig=kubeconfig,
        )
