"""Where a training job's wall time goes: productive, wasted, recovery, waiting.

A pure ledger, fed on a timer with what the operator sees of each job (its
pods labelled ``pitcrew.dev/job``, the phases of their nodes, the progress
rank 0 writes with :mod:`pitcrew.client.progress`). The categories partition the
job's wall time, so job goodput is ``productive / all`` over any window.

The ledger places each event at the time the job shows it happened, not at
the tick that sees it, so an outage shorter than a tick is still an
outage:

- **interrupted** at the earliest evidence: a pod that stopped (its
  container's ``finishedAt``, its deletion time), a pod replaced (a new UID)
  or restarted (a higher restart count), or a progress report whose step is
  lower than one before it (a restart from a checkpoint). The running time
  since the last checkpoint is **wasted** (the lost steps times the step
  time); the cause is a node fault when a pod's node left service.
- **recovery** (a node fault) or **waiting** (anything else: first
  scheduling, capacity, a preemption) lasts until progress resumes: every
  pod runs again and a report shows steps beyond the checkpoint the job
  restarted from; resumption is placed at that report's time less the steps
  since the checkpoint at the measured step time. A job that reports no
  progress resumes when its last pod started.
- **productive** is running time credited at each checkpoint (running time
  since the last checkpoint is *pending* until then); a job that never
  reports checkpoints has all its running time productive, since nothing
  says what it would lose.

Time already credited is never taken back (the counters cannot go down):
what is uncertain (running since the checkpoint, down until resumption is
seen) stays pending until the evidence says which it was.

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
    uid: str = ""
    restarts: int = 0
    """Container restarts: a higher count than before is an interruption."""
    started_at: datetime.datetime | None = None
    """When its containers last started running."""
    stopped_at: datetime.datetime | None = None
    """When it stopped: its deletion, or its last container's ``finishedAt``."""
    gone: bool = False
    """Deleted: no longer in the cluster, kept in the observation for its stop time."""

    @property
    def key(self) -> str:
        return self.uid or self.name


@dataclass(frozen=True)
class JobObservation:
    pods: tuple[JobPod, ...]
    progress: Progress | None = None
    out_of_service: frozenset[str] = frozenset()
    """Nodes Pitcrew has taken out of service (now, or since the last tick)."""
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


class State(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    DOWN = "down"
    FINISHED = "finished"


@dataclass
class JobLedger:
    last: datetime.datetime
    """The time of the previous tick (the ledger starts counting here)."""
    size: int = 0
    state: State = State.WAITING
    since: datetime.datetime | None = None
    """Start of the stretch not yet credited (running since the last checkpoint, or
    down since the interruption)."""
    cause: Cause = Cause.OTHER
    """Why the job is down."""
    pods: dict[str, JobPod] = field(default_factory=dict)
    """The pods of the last tick, by name."""
    checkpoint: datetime.datetime | None = None
    restart_step: int = 0
    """The checkpoint step the job restarts from after an interruption."""
    top_step: int | None = None
    """The highest step reported since the job last (re)started."""
    step_seconds: float | None = None
    reports: bool = False
    """The job reports progress (then it resumes when its progress does)."""
    checkpoints: bool = False
    """The job reports checkpoints (then running time since the last one is pending)."""
    progress: Progress | None = None
    """The last progress report since the job last (re)started."""
    achieved_flops: float | None = None

    def tick(self, observation: JobObservation, now: datetime.datetime) -> Tick:
        out = Tick()
        if self.since is None:
            self.since = self.last
        self.last = now
        present = [p for p in observation.pods if not p.gone]
        self.size = observation.size or max(self.size, len(present))
        if self.state is State.FINISHED:
            return out
        if observation.finished:
            if self.state is State.RUNNING:
                self._credit(out, PRODUCTIVE, now)
            else:
                self._credit(out, self._down_category(), now)
            self.state = State.FINISHED
            return out
        progress = observation.progress
        if self.state is State.RUNNING:
            # A checkpoint the job took before it was interrupted is credited first.
            self._checkpointed(progress, now, out)
            interrupted = self._interruption(observation, now)
            if interrupted is not None:
                when, cause = interrupted
                # Without checkpoints nothing says what was lost: all of it counted.
                self._credit(out, WASTED if self.checkpoints else PRODUCTIVE, when)
                out.interruptions.append(cause)
                self.state, self.cause = State.DOWN, cause
                self.restart_step = self._checkpoint_step()
                # Step times are measured again after the restart, never across it.
                self.top_step, self.achieved_flops, self.progress = None, None, None
        if self.state is not State.RUNNING:
            self._resume(observation, now, out)
        if self.state is State.RUNNING:
            self._checkpointed(progress, now, out)
            if not self.checkpoints:
                self._credit(out, PRODUCTIVE, now)
            if progress is not None and (self.top_step is None or progress.step > self.top_step):
                self.top_step = progress.step
        self._measure(progress)
        self.pods = {p.key: p for p in present}
        live = [p for p in observation.pods if p.running]
        out.gpus = sum(p.gpus for p in live)
        peak = sum(p.gpus * p.peak_flops_per_gpu for p in live if p.peak_flops_per_gpu)
        if self.state is State.RUNNING and self.achieved_flops is not None and peak > 0:
            out.mfu = self.achieved_flops / peak
        return out

    # -- the evidence ---------------------------------------------------------------------

    def _interruption(
        self, observation: JobObservation, now: datetime.datetime
    ) -> tuple[datetime.datetime, Cause] | None:
        """When the running job was interrupted, and why; None if it was not."""
        times: list[datetime.datetime] = []
        nodes: set[str] = set()
        since = self.since or now
        current = {p.key: p for p in observation.pods}
        for key, before in self.pods.items():
            pod = current.get(key)
            if pod is None:  # gone, and the store kept nothing of it
                times.append(now)
                nodes.add(before.node)
            elif pod.restarts > before.restarts:
                times.append(pod.stopped_at or now)
                nodes.add(pod.node)
        for pod in observation.pods:
            stopped = pod.stopped_at is not None and pod.stopped_at >= since
            if not pod.running and (stopped or (pod.key in self.pods and not pod.gone)):
                times.append(pod.stopped_at if stopped and pod.stopped_at else now)
                nodes.add(pod.node)
        live = sum(p.running for p in observation.pods)
        if live < self.size and not times:
            times.append(now)
        progress, top = observation.progress, self.top_step
        if progress is not None and top is not None and progress.step < top:
            # Restarted from a checkpoint between two ticks (inside its pods): at the
            # latest after the last report that showed the higher step.
            times.append(self.progress.time if self.progress is not None else now)
        if not times:
            return None
        when = min(max(min(times), self.since or now), now)
        faulted = bool(nodes & observation.out_of_service)
        return when, Cause.NODE_FAULT if faulted else Cause.OTHER

    def _resume(self, observation: JobObservation, now: datetime.datetime, out: Tick) -> None:
        """Credit time down until progress resumes, or as far as it is sure."""
        live = [p for p in observation.pods if p.running and not p.gone]
        everyone = bool(live) and len(live) >= self.size
        affected = {p.node for p in live} & observation.out_of_service
        category = self._down_category()
        if not everyone or affected:
            self._credit(out, category, now)
            return
        started = max((p.started_at for p in live if p.started_at), default=None)
        progress = observation.progress
        self.reports = self.reports or progress is not None
        if not self.reports:
            resumed = min(now, started or now)
        elif (
            progress is not None
            and progress.time > (self.since or now)
            and progress.step > self.restart_step
        ):
            # The steps since the restart point, at the measured step time, before the
            # report; with no step time measured yet, from when the last pod started.
            if self.step_seconds is not None:
                estimate = progress.time - self._steps_seconds(progress)
            else:
                estimate = started or progress.time
            resumed = min(now, max(estimate, started or estimate, self.since or estimate))
        else:
            # Every pod runs, no progress yet: down at least until the last pod started.
            if started is not None:
                self._credit(out, category, min(now, started))
            return
        self._credit(out, category, resumed)
        self.state = State.RUNNING
        self.checkpoint = None
        self.top_step = None

    def _checkpointed(self, progress: Progress | None, now: datetime.datetime, out: Tick) -> None:
        """Credit the running time up to the newest checkpoint as productive."""
        if progress is None or progress.checkpoint_time is None:
            return
        self.checkpoints = True
        stamp = progress.checkpoint_time
        if stamp > (self.since or stamp) and (self.checkpoint is None or stamp > self.checkpoint):
            self._credit(out, PRODUCTIVE, min(stamp, now))
            self.checkpoint = stamp

    def _measure(self, progress: Progress | None) -> None:
        """Step time and achieved model FLOP/s between two distinct progress reports."""
        before = self.progress
        if progress is None or (before is not None and progress.time <= before.time):
            return
        self.progress = progress
        if before is None or progress.step <= before.step:
            return
        elapsed = (progress.time - before.time).total_seconds()
        self.step_seconds = elapsed / (progress.step - before.step)
        flops = progress.model_flops_per_step
        if flops is not None and self.state is State.RUNNING:
            self.achieved_flops = flops * (progress.step - before.step) / elapsed

    # -- arithmetic -----------------------------------------------------------------------

    def _checkpoint_step(self) -> int:
        progress = self.progress
        if progress is None or progress.checkpoint_step is None:
            return 0
        return progress.checkpoint_step

    def _steps_seconds(self, progress: Progress) -> datetime.timedelta:
        """How long the steps since the restart point took, at the measured step time."""
        steps = max(0, progress.step - self.restart_step)
        return datetime.timedelta(seconds=steps * (self.step_seconds or 0.0))

    def _down_category(self) -> str:
        return RECOVERY if self.state is State.DOWN and self.cause is Cause.NODE_FAULT else WAITING

    def _credit(self, out: Tick, category: str, until: datetime.datetime) -> None:
        """Credit ``[since, until)`` to ``category`` and move ``since`` on."""
        since = self.since or until
        if until > since:
            seconds = (until - since).total_seconds()
            out.seconds[category] = out.seconds.get(category, 0.0) + seconds
            self.since = until
