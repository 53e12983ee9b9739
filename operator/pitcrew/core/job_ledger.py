"""Where a training job's wall time goes: productive, wasted, recovery, waiting.

A pure ledger, fed on a timer with what the operator sees of each job (its
pods labelled ``pitcrew.dev/job``, the phases of their nodes, the progress
rank 0 writes with :mod:`pitcrew.client.progress`). The categories partition the
job's wall time, so job goodput is ``productive / all`` over any window:

- **productive**: running time up to the job's last checkpoint. Time since
  the last checkpoint is *pending*: it becomes productive at the next
  checkpoint, or **wasted** when an interruption throws it away (the job
  restarts from that checkpoint). A job that never reports checkpoints has
  all its running time counted productive: nothing says what it would lose.
- **recovery**: from a pod lost to a node fault (its node left service)
  until every pod of the job runs again;
- **waiting**: not all pods running for any other reason (first scheduling,
  a preemption, capacity).

Model FLOPs utilisation comes from the progress reports too: FLOPs per step
(or 6 x parameters x tokens per step) times steps per second, over the
job's GPUs times their peak dense bf16 FLOP/s.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import StrEnum

PRODUCTIVE, WASTED, RECOVERY, WAITING = "productive", "wasted", "recovery", "waiting"
CATEGORIES = (PRODUCTIVE, WASTED, RECOVERY, WAITING)


class Cause(StrEnum):
    NODE_FAULT = "node-fault"
    OTHER = "other"


@dataclass(frozen=True)
class Progress:
    """One report from rank 0 (the ``pitcrew.dev/progress`` pod annotation)."""

    step: int
    time: datetime.datetime
    checkpoint_step: int | None = None
    checkpoint_time: datetime.datetime | None = None
    flops_per_step: float | None = None
    """Model FLOPs per optimizer step (all ranks), or None to estimate 6·N·tokens."""
    parameters: int | None = None
    tokens_per_step: int | None = None

    @property
    def model_flops_per_step(self) -> float | None:
        if self.flops_per_step is not None:
            return self.flops_per_step
        if self.parameters is not None and self.tokens_per_step is not None:
            return 6.0 * self.parameters * self.tokens_per_step
        return None


@dataclass(frozen=True)
class JobPod:
    name: str
    running: bool
    node: str
    gpus: int
    peak_flops_per_gpu: float | None = None
    """Peak dense bf16 FLOP/s of the node's GPU model, if known."""


@dataclass(frozen=True)
class JobObservation:
    pods: tuple[JobPod, ...]
    progress: Progress | None = None
    out_of_service: frozenset[str] = frozenset()
    """Nodes (of this job, now or at the last tick) that Pitcrew has taken out of service."""
    size: int | None = None
    """Pods the job needs (``pitcrew.dev/job-size``); default: the most ever seen."""
    finished: bool = False


@dataclass
class Tick:
    """What one tick adds to the metrics."""

    seconds: dict[str, float] = field(default_factory=dict)
    interruptions: list[Cause] = field(default_factory=list)
    mfu: float | None = None
    gpus: int = 0


@dataclass
class JobLedger:
    last: datetime.datetime
    size: int = 0
    nodes: dict[str, str] = field(default_factory=dict)
    """pod -> node at the last tick: where a pod that vanished used to run."""
    running: bool = False
    pending: float = 0.0
    """Running seconds since the last checkpoint (productive once checkpointed)."""
    checkpoint: datetime.datetime | None = None
    recovering: bool = False
    progress: Progress | None = None
    achieved_flops: float | None = None

    def tick(self, observation: JobObservation, now: datetime.datetime) -> Tick:
        dt = max(0.0, (now - self.last).total_seconds())
        self.last = now
        out = Tick()
        if observation.finished:
            self._add(out, PRODUCTIVE, self.pending)
            self.pending, self.running = 0.0, False
            return out
        live = [p for p in observation.pods if p.running]
        self.size = observation.size or max(self.size, len(observation.pods))
        current = {p.name: p.node for p in observation.pods}
        lost = [node for pod, node in self.nodes.items() if pod not in current]
        faulted = any(n in observation.out_of_service for n in [*lost, *current.values()])
        runs_now = bool(live) and len(live) >= self.size and not faulted
        if self.running and (lost or not runs_now):  # a pod replaced between ticks counts too
            cause = Cause.NODE_FAULT if faulted else Cause.OTHER
            out.interruptions.append(cause)
            self._add(out, WASTED, self.pending)
            self.pending = 0.0
            self.recovering = cause is Cause.NODE_FAULT
            self.achieved_flops = None
        if runs_now:
            self._run(observation.progress, dt, now, out)
            self.recovering = False
            peak = sum(p.gpus * p.peak_flops_per_gpu for p in live if p.peak_flops_per_gpu)
            if self.achieved_flops is not None and peak > 0:
                out.mfu = self.achieved_flops / peak
        else:
            self._add(out, RECOVERY if self.recovering else WAITING, dt)
        self.running = runs_now
        self.nodes = current
        out.gpus = sum(p.gpus for p in live)
        return out

    def _run(self, progress: Progress | None, dt: float, now: datetime.datetime, out: Tick) -> None:
        if progress is None or progress.checkpoint_time is None:
            self._add(out, PRODUCTIVE, dt)
        else:
            self.pending += dt
            if self.checkpoint is None or progress.checkpoint_time > self.checkpoint:
                since = max(0.0, (now - progress.checkpoint_time).total_seconds())
                self._add(out, PRODUCTIVE, max(0.0, self.pending - since))
                self.pending = min(self.pending, since)
                self.checkpoint = progress.checkpoint_time
        self._measure(progress)

    def _measure(self, progress: Progress | None) -> None:
        """Achieved model FLOP/s between the last two distinct progress reports."""
        before = self.progress
        if progress is None or (before is not None and progress.time <= before.time):
            return
        self.progress = progress
        flops = progress.model_flops_per_step
        if before is None or flops is None or progress.step <= before.step:
            return
        elapsed = (progress.time - before.time).total_seconds()
        self.achieved_flops = flops * (progress.step - before.step) / elapsed

    @staticmethod
    def _add(out: Tick, category: str, seconds: float) -> None:
        if seconds > 0:
            out.seconds[category] = out.seconds.get(category, 0.0) + seconds
