"""The demo's training job: real pods, a simulated training loop.

One job of ``size`` pods (8 GPUs each, labelled ``pitcrew.dev/job``) that
the real scheduler places on the simulated nodes. The driver plays the part
of the training framework and its launcher (torchrun, JobSet): while every
pod runs it advances steps, checkpoints every ``checkpoint_every`` steps
(writing ``pitcrew.dev/checkpoint-at`` on its pods, so Pitcrew can drain a
suspect node right after a checkpoint), and reports progress from rank 0
with :class:`pitcrew.client.progress.ProgressReporter`. When a pod is lost (evicted
from a failing node, or the job crashes) it recreates the missing pods and
resumes from the last checkpoint, losing the steps since.

The job is synchronous, as data-parallel training is: each rank's compute time
is the healthy step time, times the ``slow-gemm`` factor of its node's
simulated GPUs (the faults annotation, re-read every second by
:meth:`TrainingJob.watch_slowdown`, so a repaired node is fast again), with a
little noise; a step takes as long as the slowest rank.
Each report carries the median and the nodes furthest behind their usual pace, as
the framework hooks gather them (:mod:`pitcrew.client.distributed`); every rank has
one role (data parallelism: all ranks are peers), so a rank on a node that was
already slow when the job started is found too.

Every other rank writes its own pod's heartbeat as the hooks do (a
:class:`~pitcrew.client.background.BackgroundReporter` each, every
:data:`HEARTBEAT_EVERY` seconds, beating on while no step comes).
:meth:`TrainingJob.hang` freezes rank 0 for good: the others wait in the next
collective, every pod still running, until Pitcrew (or, without it, the NCCL
watchdog) ends it.
"""

from __future__ import annotations

import datetime
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from gpuhealth.faults import FaultListError, SlowGemm, parse_faults
from pitcrew.api.vocabulary import (
    CHECKPOINT_ANNOTATION,
    FAULTS_ANNOTATION,
    GPU_RESOURCE,
    JOB_LABEL,
    JOB_SIZE_LABEL,
)
from pitcrew.client.background import BackgroundReporter
from pitcrew.client.progress import ProgressReporter
from pitcrew.client.ranks import Paces
from pitcrew.kube.client import request

logger = logging.getLogger(__name__)
NAMESPACE = "pitcrew-demo"
START_AFTER = "sim.pitcrew.dev/start-after"
"""A pod annotation: how long kwok takes to run the pod (``devcluster/stages.yaml``)."""
# A 70B-parameter model; tokens per step are chosen so that the simulated step
# rate works out at about 40 % MFU (the 6·N·tokens estimate), as large
# training runs report.
PARAMETERS = 70_000_000_000
DEMO_MFU = 0.4
H100_BF16_FLOPS = 989.4e12
ROLE = "data-parallel"
"""Every rank's role: all ranks of a data-parallel job keep one pace."""
HEARTBEAT_EVERY = 5.0
"""Seconds between heartbeat writes of ranks other than 0 (rank 0 writes with its reports)."""
NOISE = 0.03
"""Each rank's step-to-step jitter (a standard deviation, as a fraction): a healthy rank
is the slowest now and then, by a few per cent, never by the straggler threshold."""


@dataclass
class JobState:
    step: int = 0
    checkpoint_step: int = 0
    checkpoint_time: datetime.datetime = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC)
    )
    running: int = 0
    restarts: int = 0
    lost_steps: float = 0.0
    """Steps thrown away by restarts, the step in progress at each loss included."""
    hung: tuple[int, float] | None = None
    """The rank that stopped and when (monotonic seconds), while the job hangs."""
    hang_restarted_after: float | None = None
    """Seconds from the last step of the hung job to its pods being lost (restarted)."""
    events: list[str] = field(default_factory=list)


class TrainingJob:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        name: str,
        size: int,
        steps_per_second: float,
        checkpoint_every: int,
        gpus_per_pod: int = 8,
        node_selector: dict[str, str] | None = None,
        report_every: float = 0.0,
        start_after: str = "",
        seed: int = 0,
    ) -> None:
        self.api = api
        self.start_after = start_after
        """How long each pod takes to start (a Go duration; kwok's ``pod-ready`` stage
        reads it): pulling an image, loading a checkpoint, initialising NCCL."""
        self.core = client.CoreV1Api(api)
        self.name = name
        self.size = size
        self.steps_per_second = steps_per_second
        self.checkpoint_every = checkpoint_every
        self.gpus = gpus_per_pod
        self.node_selector = node_selector or {}
        """Where its pods may go (a test keeps them on its own nodes)."""
        self.state = JobState()
        self.noise = random.Random(seed)  # noqa: S311 - a simulation, not a secret
        self.slowdown: dict[str, float] = {}
        """Each node's compute slowdown (its ``slow-gemm`` factor), kept fresh by
        :meth:`watch_slowdown`."""
        self.was_running = False
        self.progress = 0.0
        self.report_every = report_every
        """Seconds between progress reports: every step by default, since the demo
        compresses time (a fault every few seconds, not every few hours)."""
        self.reporter = self._reporter()
        self.paces: Paces | None = None
        """Rank 0's judge of its ranks' paces: a restarted rank 0 starts a new one."""
        self.beats = self._beats()

    def _beats(self) -> list[BackgroundReporter]:
        """The heartbeats of ranks 1 and up, each written on its own pod by a thread of
        its own: kept across restarts (a thread per rank, not per rank and restart)."""
        return [
            BackgroundReporter(
                pod=self.pod_name(rank),
                namespace=NAMESPACE,
                min_interval=HEARTBEAT_EVERY,
                rank=rank,
                progress=False,
                api=self.core,
            )
            for rank in range(1, self.size)
        ]

    def _reporter(self) -> ProgressReporter:
        """Rank 0's reporter. A restarted rank 0 is a new process with a new reporter,
        which writes its first step at once: that report marks the resumption."""
        return ProgressReporter(
            pod=self.pod_name(0),
            namespace=NAMESPACE,
            min_interval=self.report_every,
            parameters=PARAMETERS,
            tokens_per_step=int(
                DEMO_MFU
                * self.size
                * self.gpus
                * H100_BF16_FLOPS
                / (6 * PARAMETERS * self.steps_per_second)
            ),
            api=self.core,
        )

    def pod_name(self, rank: int) -> str:
        return f"{self.name}-{rank}"

    def start(self) -> None:
        try:
            request(self.api, "POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
        except client.ApiException as error:
            if error.status != 409:
                raise
        for rank in range(self.size):
            self._create(rank)
        self.reporter.checkpoint(0)  # a fresh start is as good as a checkpoint at step 0

    def _create(self, rank: int) -> None:
        body = {
            "metadata": {
                "name": self.pod_name(rank),
                "labels": {JOB_LABEL: self.name, JOB_SIZE_LABEL: str(self.size), "rank": str(rank)},
                "annotations": {START_AFTER: self.start_after} if self.start_after else {},
            },
            "spec": {
                "containers": [
                    {
                        "name": "train",
                        "image": "trainer:demo",
                        "resources": {"limits": {GPU_RESOURCE: str(self.gpus)}},
                    }
                ],
                "terminationGracePeriodSeconds": 1,
                "restartPolicy": "Never",
                **({"nodeSelector": self.node_selector} if self.node_selector else {}),
            },
        }
        try:
            request(self.api, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=body)
        except client.ApiException as error:
            if error.status != 409:  # still terminating: created on a later tick
                raise

    def _pods(self) -> dict[str, dict[str, Any]]:
        listed = request(
            self.api,
            "GET",
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            query={"labelSelector": f"{JOB_LABEL}={self.name}"},
        )
        return {p["metadata"]["name"]: p for p in listed.get("items", [])}

    def crash(self) -> None:
        """A software failure: the job dies on every node and is relaunched."""
        self.state.events.append("job crashed (software): relaunching all pods")
        for name in self._pods():
            self.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)

    def hang(self) -> tuple[int, str] | None:
        """Rank 0's process freezes (a GPU driver stuck in the kernel): it neither steps
        nor reports again; the other ranks wait in the next collective and go on beating.
        The rank and its node, or None if the job is not running."""
        pods = self._pods()
        if self.state.hung is not None or self.state.running < self.size or self.size < 2:
            return None
        node = str((pods.get(self.pod_name(0), {}).get("spec") or {}).get("nodeName") or "")
        self.state.hung = (0, time.monotonic())
        self.state.events.append(f"rank 0 on {node} froze: the job hangs")
        return 0, node

    def tick(self, seconds: float) -> None:
        pods = self._pods()
        running = [name for name, p in pods.items() if _phase(p) == "Running" and not _deleting(p)]
        self.state.running = len(running)
        for rank in range(self.size):
            if self.pod_name(rank) not in pods:
                self._create(rank)
        for name, pod in pods.items():
            if _phase(pod) in ("Failed", "Succeeded") and not _deleting(pod):
                self.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        if len(running) < self.size:
            self._ended_hang()
            if self.was_running:
                lost = self.state.step - self.state.checkpoint_step + self.progress
                self.state.lost_steps += lost
                self.state.restarts += 1
                self.state.step = self.state.checkpoint_step
                self.progress = 0.0
                self.reporter = self._reporter()
                self.paces = None
                self.reporter.resumed(self.state.checkpoint_step, self.state.checkpoint_time)
                self.state.events.append(
                    f"lost a pod: back to step {self.state.checkpoint_step}, {lost:.1f} steps lost"
                )
            self.was_running = False
            return
        self.was_running = True
        if self.state.hung is not None:
            return  # every rank waits for the one that stopped
        nodes = [str(pods[name]["spec"].get("nodeName") or "") for name in sorted(running)]
        ranks = self._rank_seconds(nodes)
        self.progress += seconds / max(ranks)
        whole = int(self.progress)
        self.progress -= whole
        before = self.state.step
        self.state.step += whole
        if self.state.step // self.checkpoint_every > before // self.checkpoint_every:
            self._checkpoint(running)
        elif whole:
            if self.paces is None or self.paces.nodes != nodes:
                self.paces = Paces(nodes, [ROLE] * len(nodes))
            self.reporter.step(self.state.step, ranks=self.paces.judge(ranks))
        if whole:
            for beat in self.beats:
                beat.step(self.state.step)

    def _ended_hang(self) -> None:
        """A pod lost while the job hung: Pitcrew (or the watchdog) restarted it."""
        if self.state.hung is not None:
            self.state.hang_restarted_after = time.monotonic() - self.state.hung[1]
            self.state.hung = None

    def _rank_seconds(self, nodes: list[str]) -> list[float]:
        """Each rank's compute time per step, on the node it runs on."""
        healthy = 1 / self.steps_per_second
        return [
            healthy * self.slowdown.get(node, 1.0) * (1 + abs(self.noise.gauss(0, NOISE)))
            for node in nodes
        ]

    def watch_slowdown(self, stop: threading.Event, every: float = 1.0) -> None:
        """Re-read the nodes' slowdowns until ``stop`` (a thread of its own: the
        training loop's ticks must stay as short as its pod listing)."""
        while not stop.wait(every):
            try:
                self.slowdown = self._slowdown()
            except client.ApiException as error:
                logger.warning("reading the nodes' faults failed (%s); retried", error.reason)

    def _slowdown(self) -> dict[str, float]:
        listed = request(self.api, "GET", "/api/v1/nodes").get("items", [])
        found = {}
        for node in listed:
            text = (node["metadata"].get("annotations") or {}).get(FAULTS_ANNOTATION, "")
            try:
                faults = parse_faults(text)
            except FaultListError:
                continue
            factors = [f.factor for f in faults if isinstance(f, SlowGemm)]
            if factors:
                found[node["metadata"]["name"]] = max(factors)
        return found

    def _checkpoint(self, running: list[str]) -> None:
        step = self.state.step - self.state.step % self.checkpoint_every
        self.state.checkpoint_step = step
        self.reporter.checkpoint(step)
        self.state.checkpoint_time = datetime.datetime.now(datetime.UTC)
        stamp = self.state.checkpoint_time.isoformat()
        for pod in running:
            try:
                self.core.patch_namespaced_pod(
                    pod, NAMESPACE, {"metadata": {"annotations": {CHECKPOINT_ANNOTATION: stamp}}}
                )
            except client.ApiException as error:
                if error.status != 404:
                    raise


def _phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


def _deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))
