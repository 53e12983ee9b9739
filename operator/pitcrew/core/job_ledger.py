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
  time); the cause is a node fault when a pod's node left service. A
  checkpoint saved before the loss but first shown by the restarted job's
  report (the checkpoint it loaded) is saved work, not waste.
- **recovery** (a node fault) or **waiting** (anything else: first
  scheduling, capacity, a preemption) lasts until progress resumes: every
  pod runs again and a report shows steps beyond the checkpoint the job
  restarted from; resumption is placed at that report's time less the steps
  since the checkpoint at the measured step time. A job that reports no
  progress resumes when its last pod started. A pod lost after every pod ran
  again but before progress resumed is another interruption (the job
  restarted and crashed again); that stretch stays down time.
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
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from operator import itemgetter
from typing import NamedTuple

PRODUCTIVE, WASTED, RECOVERY, WAITING = "productive", "wasted", "recovery", "waiting"
CATEGORIES = (PRODUCTIVE, WASTED, RECOVERY, WAITING)
SLACK = datetime.timedelta(seconds=1)
"""Pod times are whole seconds: a report up to this much after a pod's stop may be
from before it."""
SECOND_END = SLACK / 2
"""A pod's stop is placed mid-second (the second its whole-second stamp names); for
ordering it against reports it goes at that second's end. A report in the same second
that shows progress was written before the loss: a job makes none after losing a
pod until it has restarted, which takes longer than a second."""


class Cause(StrEnum):
    NODE_FAULT = "node-fault"
    OTHER = "other"


@dataclass(frozen=True)
class RankTime:
    """A node's step time in one report: its rank furthest behind its usual pace,
    averaged over the steps since the previous report."""

    node: str
    step_seconds: float
    usual_seconds: float | None = None
    """What that rank would have taken at its usual pace (:mod:`pitcrew.client.ranks`):
    ranks of a pipeline's stages or MoE experts differ by design. None in a report
    that names no usual pace (a hand-written one, an older client): the job's median."""


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
    step_seconds: float | None = None
    """The median rank's step time since the previous report, when every rank's was
    gathered (the framework hooks do)."""
    slowest: tuple[RankTime, ...] = ()
    """The slowest ranks' nodes and their step times, slowest first."""

    @property
    def model_flops_per_step(self) -> float | None:
        if self.flops_per_step is not None:
            return self.flops_per_step
        if self.parameters is not None and self.tokens_per_step is not None:
            return 6.0 * self.parameters * self.tokens_per_step
        return None


class JobPod(NamedTuple):
    """One pod of a job as the ledger reads it. A named tuple, not a dataclass: a tick of a
    job of thousands of pods reads as many, and the simulator builds them all again at
    every restart of its job; a tuple costs a third of a frozen dataclass to build."""

    name: str
    running: bool
    node: str
    gpus: int
    peak_flops_per_gpu: float | None = None
    """Peak dense bf16 FLOP/s of the node's GPU model, if known."""
    uid: str = ""
    created_at: datetime.datetime | None = None
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
    """The newest progress report."""
    out_of_service: frozenset[str] = frozenset()
    """Nodes Pitcrew has taken out of service."""
    recently_out: frozenset[str] = frozenset()
    """Nodes Pitcrew took out of service lately and may have put back already: a pod
    lost on one was lost to a node fault."""
    size: int | None = None
    """Pods the job needs (``pitcrew.dev/job-size``); default: the most ever seen."""
    finished: bool = False
    reports: tuple[Progress, ...] = ()
    """Other reports seen since the last tick (from pods already gone), any order."""


@dataclass
class Tick:
    """What one tick adds to the metrics."""

    seconds: dict[str, float] = field(default_factory=dict)
    interruptions: list[Cause] = field(default_factory=list)
    mfu: float | None = None
    gpus: int = 0


@dataclass(frozen=True)
class _Pods:
    """What a tick reads of its observation's pods, read in one pass. The ledger keeps
    it: a tick handed the very same pods (a caller that builds them again only when
    one changes, as the simulator does at every event of a long job) reads nothing
    again, so such a tick costs nothing per pod."""

    pods: tuple[JobPod, ...]
    order: list[str]
    """Each pod's key, in the order of ``pods``."""
    by_key: dict[str, JobPod]
    """Every pod, gone or not, by key."""
    present: dict[str, JobPod]
    """The pods not gone, by key."""
    keys: frozenset[str]
    """Every pod's key, gone or not."""
    alive: int
    """Pods not gone that run or are yet to run."""
    live: int
    """Pods not gone that run."""
    started: datetime.datetime | None
    """The latest start of those."""
    latest_start: datetime.datetime | None
    """The latest start of any pod."""
    gpus: int
    """GPUs of the running pods (gone or not)."""
    peak: float
    """Their peak FLOP/s, where known."""

    @classmethod
    def of(cls, pods: tuple[JobPod, ...]) -> _Pods:
        order = [pod.uid or pod.name for pod in pods]
        by_key = dict(zip(order, pods, strict=True))
        present = by_key
        alive = live = gpus = 0
        peak = 0.0
        started: datetime.datetime | None = None
        latest: datetime.datetime | None = None
        for pod in pods:
            start = pod.started_at
            if start and (latest is None or start > latest):
                latest = start
            if pod.running:
                gpus += pod.gpus
                if pod.peak_flops_per_gpu:
                    peak += pod.gpus * pod.peak_flops_per_gpu
            if pod.gone:
                continue
            if pod.running:
                alive += 1
                live += 1
                if start and (started is None or start > started):
                    started = start
            elif pod.stopped_at is None:
                alive += 1
        if any(pod.gone for pod in pods):
            present = {key: pod for key, pod in zip(order, pods, strict=True) if not pod.gone}
        return cls(
            pods=pods,
            order=order,
            by_key=by_key,
            present=present,
            keys=frozenset(order),
            alive=alive,
            live=live,
            started=started,
            latest_start=latest,
            gpus=gpus,
            peak=peak,
        )

    def started_by(self, when: datetime.datetime) -> datetime.datetime | None:
        """The latest start of a pod at or before ``when``."""
        latest = self.latest_start
        if latest is None or latest <= when:
            return latest
        return max(
            (p.started_at for p in self.pods if p.started_at and p.started_at <= when),
            default=None,
        )


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
    """The pods of the last tick, by UID."""
    used: dict[str, datetime.datetime] = field(default_factory=dict)
    """The last stop of each pod already taken as evidence (a failed pod stays until
    deleted). Only the last: a pod's stops only move forward, and keeping every one
    would grow with each restart of a long job."""
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
    newest: datetime.datetime | None = None
    """The time of the newest report taken (older ones are not taken again)."""
    achieved_flops: float | None = None
    _alive: dict[datetime.datetime, int] = field(default_factory=dict, repr=False)
    """This tick's count of pods running at an instant, by instant (see ``_stopped``)."""
    _seen: _Pods | None = field(default=None, repr=False)
    """The previous tick's pods, as read."""

    def tick(self, observation: JobObservation, now: datetime.datetime) -> Tick:
        out = Tick()
        self._alive = {}
        if self.since is None:
            # A job created since the previous tick is counted from its first pod.
            created = min((p.created_at for p in observation.pods if p.created_at), default=None)
            self.since = max(self.last, created or self.last)
        self.last = now
        pods = self._seen
        same = pods is not None and pods.pods is observation.pods
        if pods is None or not same:
            pods = _Pods.of(observation.pods)
        # Without a declared size, the most pods seen alive at once (running or yet to
        # run: a stopped pod beside its replacement is not one more).
        self.size = observation.size or max(self.size, pods.alive)
        if self.state is State.FINISHED:
            return out
        if observation.finished:
            self._credit(out, PRODUCTIVE if self.state is State.RUNNING else self._down(), now)
            self.state = State.FINISHED
            return out
        # What the job shows, in the order it happened: its reports (rank 0's last words
        # from a pod already gone among them) and its pods' stops. The very pods of the
        # previous tick show no stop or restart it has not taken already.
        read = () if same else zip(observation.pods, pods.order, strict=True)
        for _, _, event in self._events(observation, now, pods=read):
            if isinstance(event, Progress):
                self._report(event, observation, pods, out)
            else:
                self._stopped(event, observation, pods, now, out)
        self._now(observation, pods, now, out, same=same)
        if not same:
            self.pods = pods.present
            if not self.used.keys() <= pods.keys:
                self.used = {k: t for k, t in self.used.items() if k in pods.keys}
        self._seen = pods
        out.gpus = pods.gpus
        if self.state is State.RUNNING and self.achieved_flops is not None and pods.peak > 0:
            out.mfu = self.achieved_flops / pods.peak
        return out

    def _events(
        self,
        observation: JobObservation,
        now: datetime.datetime,
        *,
        pods: Iterable[tuple[JobPod, str]],
    ) -> list[tuple[datetime.datetime, int, Progress | list[tuple[JobPod, str]]]]:
        """Reports and pod stops, in the order they happened (pods that show a stop at
        the same time, in their order). Pods that stopped at one instant, one after the
        other in that order, come as one event: the pods of one loss, as a job's restart
        stops every pod at once. How they are cut into events does not change what
        :meth:`_stopped` finds, only what it costs."""
        events: list[tuple[datetime.datetime, int, Progress | list[tuple[JobPod, str]]]] = []
        for report in {*observation.reports, observation.progress}:
            if report is not None and (self.newest is None or report.time > self.newest):
                events.append((report.time, 0, report))
        used, before_pods = self.used, self.pods
        loss: list[tuple[JobPod, str]] | None = None
        lost_at: datetime.datetime | None = None
        for pod, key in pods:
            stopped = pod.stopped_at
            if pod.running or stopped is None:
                before = before_pods.get(key)
                if before is None or pod.restarts <= before.restarts:
                    continue
            elif used.get(key) == stopped:
                continue
            if loss is None or stopped != lost_at:
                loss, lost_at = [], stopped
                when = now if stopped is None else min(stopped + SECOND_END, now)
                events.append((when, 1, loss))
            loss.append((pod, key))
        events.sort(key=itemgetter(0, 1))  # stable: pods of one time stay in their order
        return events

    # -- the events -----------------------------------------------------------------------

    def _report(
        self, report: Progress, observation: JobObservation, pods: _Pods, out: Tick
    ) -> None:
        self.reports = True
        self.newest = report.time
        if report.checkpoint_time is not None:
            self.checkpoints = True
        if self.state is State.RUNNING:
            top = self.top_step
            if top is not None and report.step < top:
                # Restarted from a checkpoint inside its pods: at the latest after the
                # last report that showed the higher step.
                last = self.progress.time if self.progress is not None else report.time
                self._interrupt(last, Cause.OTHER, observation, out)
            else:
                self._checkpointed(report, out)
                self.top_step = max(top or report.step, report.step)
        if self.state is not State.RUNNING:
            self._resume_at(report, pods, out)
        self._measure(report)

    def _stopped(
        self,
        loss: list[tuple[JobPod, str]],
        observation: JobObservation,
        pods: _Pods,
        now: datetime.datetime,
        out: Tick,
    ) -> None:
        """Pods (with their keys) that showed a stop at one instant, in order. The first
        to stop a running job interrupts it. Each one after that is a loss of its own
        only if it ran with every pod the job needs: it had started, and so had enough
        others that had not stopped by then (a pod stopping in the same instant is part
        of the same loss). That count is the instant's, so a job's restart, which stops
        every pod at once, costs one count, not one per pod."""
        stopped = loss[0][0].stopped_at
        at = min(stopped or now, now)
        if stopped is not None:
            self.used.update(dict.fromkeys((key for _, key in loss), stopped))
        whole: bool | None = None
        for pod, _ in loss:
            if self.state is State.RUNNING:
                if at + SECOND_END < (self.since or at):
                    return  # the same for the rest of them
                self._interrupt(at, _cause({pod.node}, observation), observation, out)
                continue
            if stopped is None:
                return
            if whole is None:
                whole = self._running_at(stopped, pods) + 1 >= self.size
            if not whole:
                return  # none of them ran with the whole job
            if pod.started_at is not None and pod.started_at < stopped:
                self._lost_again(at, _cause({pod.node}, observation), out)

    def _now(
        self,
        observation: JobObservation,
        pods: _Pods,
        now: datetime.datetime,
        out: Tick,
        *,
        same: bool,
    ) -> None:
        """What the pods show now, without a time: a pod gone without a trace or not all
        pods running is an interruption now; all running with no progress reporting is
        a resumption when the last pod started."""
        everyone = pods.live > 0 and pods.live >= self.size
        if self.state is State.RUNNING:
            # The very pods of the previous tick: none of them is missing.
            missing = [] if same else [p for k, p in self.pods.items() if k not in pods.keys]
            if missing or not everyone:
                lost = {p.node for p in missing} | {
                    p.node for p in observation.pods if not p.running
                }
                out_ = observation.out_of_service | observation.recently_out
                self._interrupt(
                    now, Cause.NODE_FAULT if lost & out_ else Cause.OTHER, observation, out
                )
        started = pods.started
        if self.state is not State.RUNNING:
            if not everyone:
                self._credit(out, self._down(), now)
            elif not self.reports:
                self._credit(out, self._down(), min(now, started or now))
                self.state = State.RUNNING
            elif started is not None:
                self._credit(out, self._down(), min(now, started))  # no progress yet
        if self.state is State.RUNNING and not self.checkpoints:
            self._credit(out, PRODUCTIVE, now)

    # -- transitions ----------------------------------------------------------------------

    def _interrupt(
        self, at: datetime.datetime, cause: Cause, observation: JobObservation, out: Tick
    ) -> None:
        # A checkpoint saved before the loss may first show in a report after it (the
        # restarted job says which checkpoint it loaded): that work was saved. Pod
        # times are whole seconds, so a checkpoint within SLACK after it may be before.
        saved = [
            r.checkpoint_time
            for r in (observation.progress, *observation.reports)
            if r is not None and r.checkpoint_time is not None
        ]
        self._checkpoint_at(max((t for t in saved if t <= at + SLACK), default=None), out)
        at = max(at, self.since or at)
        # Without checkpoints nothing says what was lost: all of it counted productive.
        self._credit(out, WASTED if self.checkpoints else PRODUCTIVE, at)
        out.interruptions.append(cause)
        self.state, self.cause = State.DOWN, cause
        self.restart_step = self._checkpoint_step()
        # Step times are measured again after the restart, never across it.
        self.top_step, self.achieved_flops, self.progress = None, None, None

    def _lost_again(self, at: datetime.datetime, cause: Cause, out: Tick) -> None:
        """A pod lost after the job restarted and before its progress resumed: an
        interruption of its own. What ran since the restart showed no progress, so it
        stays down time (recovery or waiting), and the job restarts from the same
        checkpoint."""
        self._credit(out, self._down(), max(at, self.since or at))
        out.interruptions.append(cause)
        self.state, self.cause = State.DOWN, cause

    def _running_at(self, at: datetime.datetime, pods: _Pods) -> int:
        """Pods that had started before ``at`` and not stopped by then; a pod stopping at
        ``at`` is not among them. Counted once per instant and tick: the pods of one
        loss all stop at one instant, and counting per pod would cost pods squared."""
        count = self._alive.get(at)
        if count is None:
            count = sum(
                1
                for p in {**self.pods, **pods.by_key}.values()
                if p.started_at is not None
                and p.started_at < at
                and (p.stopped_at is None or p.stopped_at > at)
            )
            self._alive[at] = count
        return count

    def _resume_at(self, report: Progress, pods: _Pods, out: Tick) -> None:
        """Progress resumed if ``report`` shows steps beyond the checkpoint the job
        restarted from: at the report's time less those steps at the measured step
        time (or, with none measured yet, when the last pod that made it started)."""
        since = self.since or report.time
        restart = self.restart_step
        if self.state is State.DOWN and report.checkpoint_step is not None:
            restart = report.checkpoint_step  # the checkpoint it restarted from
        if report.time <= since or report.step <= restart:
            return
        # Pods started after the report did not make it (replacements of a later loss);
        # pods gone since may have (the report is their last words).
        started = pods.started_by(report.time)
        if self.step_seconds is not None:
            steps = datetime.timedelta(seconds=(report.step - restart) * self.step_seconds)
            estimate = report.time - steps
            if self.state is State.DOWN and estimate < since - max(SLACK, steps * 0.1):
                return  # too many steps to be made since: a report from before the loss
        else:
            estimate = started or report.time
        self._credit(out, self._down(), min(report.time, max(estimate, since)))
        self.state = State.RUNNING
        self.restart_step = restart
        self.checkpoint = None
        self.top_step = report.step
        self._checkpointed(report, out)

    def _checkpointed(self, report: Progress, out: Tick) -> None:
        """Credit the running time up to the newest checkpoint as productive."""
        if report.checkpoint_time is None:
            return
        self.checkpoints = True
        self._checkpoint_at(min(report.checkpoint_time, report.time), out)

    def _checkpoint_at(self, stamp: datetime.datetime | None, out: Tick) -> None:
        if stamp is None or not self.checkpoints or self.state is not State.RUNNING:
            return
        if stamp > (self.since or stamp) and (self.checkpoint is None or stamp > self.checkpoint):
            self._credit(out, PRODUCTIVE, stamp)
            self.checkpoint = stamp

    def _measure(self, progress: Progress) -> None:
        """Step time and achieved model FLOP/s between two distinct progress reports."""
        before = self.progress
        if before is not None and progress.time <= before.time:
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

    def _down(self) -> str:
        return RECOVERY if self.state is State.DOWN and self.cause is Cause.NODE_FAULT else WAITING

    def _credit(self, out: Tick, category: str, until: datetime.datetime) -> None:
        """Credit ``[since, until)`` to ``category`` and move ``since`` on."""
        since = self.since or until
        if until > since:
            seconds = (until - since).total_seconds()
            out.seconds[category] = out.seconds.get(category, 0.0) + seconds
            self.since = until


def _cause(nodes: set[str], observation: JobObservation) -> Cause:
    """A node fault when a pod was lost on a node Pitcrew took out of service."""
    taken_out = observation.out_of_service | observation.recently_out
    return Cause.NODE_FAULT if nodes & taken_out else Cause.OTHER
