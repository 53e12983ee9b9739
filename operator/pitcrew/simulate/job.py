"""The training job: steps, checkpoints, crashes and restarts, accounted by the real ledger.

One synchronous job of ``size`` pods, one per node. It trains in steps of
``step_time``; every ``checkpoint_interval`` of training it checkpoints, blocking
(training stops for ``checkpoint_cost``) or asynchronously (durable
``checkpoint_cost`` later). A crash anywhere stops every rank; the launcher
(JobSet semantics) deletes and recreates the pods, which the scheduler puts back on
their nodes unless a node can no longer take them, so a rank moves only off a
node that is cordoned, tainted or gone. The job runs again once every rank is on a
node with no fault that crashes it, after ``restart_cost``, from its last durable
checkpoint.

Accounting is :class:`pitcrew.core.job_ledger.JobLedger`'s, fed the pods (with
their start and stop times and restart counts) and rank 0's progress at every
event that matters to it: just before and at each interruption, when the pods run
again, one step after training resumed, at the first checkpoint after a restart
(the ledger measures the step time there), each simulated day and at the end.
The ledger does not know that a blocking checkpoint is not training: that time is
counted here (``checkpointing``) and taken out of its productive time. Time down
is split here too: ``capacity`` is the part spent with a rank that no node could
take at once (no spare, a node taken back from other work, none at all).

A synchronous job steps at its slowest rank's pace: while a rank is on a node
with a straggler, every step takes ``step_time`` times the largest slowdown among
its ranks (:meth:`Job.set_pace`). Checkpoints come every ``steps_per_checkpoint``
steps, as a trainer's ``save_steps`` do, so a slow job checkpoints less often. The
ledger counts time, not steps: a slow job's time is as productive to it as a
healthy one's. What the pace costs is counted here (``slowed``).
"""

from __future__ import annotations

import bisect
import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import repeat
from operator import add
from typing import Protocol

from pitcrew.core.job_ledger import Cause, JobLedger, JobObservation, JobPod, Progress
from pitcrew.simulate.clock import START, Clock, at
from pitcrew.simulate.node import Node
from pitcrew.simulate.realism import Restarts, pod_start
from pitcrew.simulate.settings import Assumptions, Settings


class State(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    """In a blocking checkpoint."""
    HUNG = "hung"
    """Waiting on a collective that never completes, until the watchdog."""
    DOWN = "down"
    STARTING = "starting"
    """Every pod runs; the restart cost is being paid."""


TRAINING = frozenset({State.RUNNING, State.PAUSED, State.HUNG})


class Hosts(Protocol):
    """What the job needs from the cluster it runs on."""

    def keeps(self, node: Node) -> bool:
        """A recreated pod of this node's rank lands on it again."""

    def doubtful(self, job: Job) -> list[Node]:
        """The job's nodes that may refuse their rank's recreated pod (every node
        :meth:`keeps` refuses is among them), in rank order."""

    def blocked(self, ranks: dict[int, int]) -> bool:
        """One of these nodes has a fault that crashes the job at once."""

    def release(self, node: Node) -> None:
        """The rank's pod has left the node."""

    def fill(self, job: Job) -> None:
        """Place the job's ranks that have no node."""

    def out_of_service(self) -> frozenset[str]:
        """Nodes Pitcrew has taken out of service (what the ledger reads as a node fault)."""

    def checkpointed(self) -> None:
        """The pods' checkpoint annotation changed."""

    def stalled(self) -> None:
        """The job stopped making progress while its pods run (a hang)."""


@dataclass
class Totals:
    seconds: dict[str, float] = field(default_factory=dict)
    interruptions: dict[str, int] = field(default_factory=dict)
    checkpointing: float = 0.0
    capacity: float = 0.0
    crashes: int = 0
    """Interruptions that threw progress away (every one but a planned stop)."""
    daily: list[tuple[float, dict[str, float], float]] = field(default_factory=list)
    """(day, ledger seconds so far, checkpointing so far) at each day's end."""
    straggling: float = 0.0
    """Seconds the job trained at a straggler's pace (a rank on a slow node)."""
    rolled_back: float = 0.0
    """Seconds of training the ledger had credited at checkpoints and the job threw away
    by restarting from an older one (silent data corruption found late): wasted
    progress the ledger cannot see, since it never takes time back."""
    hangs: int = 0
    """Times the job hung (progress stopped while its pods ran)."""
    slowed: float = 0.0
    """Of the training kept (not thrown away by a crash: that time is wasted progress
    already), the seconds that made no progress a healthy job would not have made in
    less time: the sum of ``dt * (1 - 1/pace)``. Set at the end of the run."""


class Job:
    _pods_read: tuple[JobPod, ...] | None
    """The pods' tuple as last read (:attr:`pods`), None since one changed."""
    in_place_epoch = -1
    """The epoch (the stretch after the next crash, or this one when down) whose start
    restarts the pods in place: Pitcrew asked when it took a node from the job."""

    def __init__(
        self,
        *,
        clock: Clock,
        settings: Settings,
        assumptions: Assumptions,
        size: int,
        gpus: int,
        hosts: Hosts,
    ) -> None:
        self.clock, self.hosts, self.size, self.gpus = clock, hosts, size, gpus
        self.step = settings.step_time
        self.steps_per_checkpoint = max(1, round(settings.checkpoint_interval / self.step))
        self.cost = settings.checkpoint_cost
        self.blocking = not settings.async_checkpoint
        self.pod_start, self.replacement_start, self.image_pull, self.images_ready = (
            pod_start(settings.realism, size),
            pod_start(settings.realism, 1),
            settings.realism.image_pull,
            0.0,
        )
        """Seconds from the pods created to the last of them running; for the one pod
        created again when the others restart in place; seconds a node takes to pull the
        job's images; when the last node the job's ranks were placed on holds them."""
        self.restarts = Restarts(settings.realism, cost=settings.restart_cost, seed=settings.seed)
        self.stall = settings.realism.snapshot_stall if settings.async_checkpoint else 0.0
        self.termination, self.watchdog = assumptions.pod_termination, assumptions.watchdog
        self.ledger, self.totals = JobLedger(last=START), Totals()
        self._state = State.DOWN
        self.pace = 1.0
        """The slowest rank's step time over a healthy one's."""
        self.pace_changes = 0
        """Generation of the step events' times: a pace change moves them."""
        self.due: dict[str, int] = {}
        """Step events of this stretch of training (``resumed``, ``checkpoint``): the step
        at whose end each one happens."""
        self.since = 0.0
        """When the state or the pace last changed (the accounting below is up to it)."""
        self.trained = 0.0
        """Seconds the job has run (``RUNNING``) up to ``since``."""
        self.slow_work = 0.0
        """``dt * (1 - 1/pace)`` summed over the running time up to ``since``."""
        self.slow_saved = 0.0
        """``slow_work`` at the last point whose work is kept (a checkpoint, a crash)."""
        self.slow_lost = 0.0
        """``slow_work`` thrown away by crashes (counted as wasted progress already)."""
        self.epoch = 0
        self.ranks: list[Node | None] = [None] * size
        self.rank_of: dict[int, int] = {}
        self._pods, self._pods_read = (
            [JobPod(f"trainer-{r}", False, "", gpus) for r in range(size)],
            None,
        )
        self.incarnation = [0] * size
        self.unplaced = set(range(size))
        """Ranks without a node."""
        self.relaunching = False
        self.short = 0
        """Ranks the cluster could not place at once (waiting for a node)."""
        self.short_since = 0.0
        self.anchor, self.anchor_step, self.anchor_part, self.anchor_done = 0.0, 0, 0.0, 0.0
        """Progress, as of time ``anchor``: ``anchor_step`` steps done and ``anchor_part``
        of the next; the last of those steps was done at ``anchor_done``."""
        self.checkpoint_step, self.checkpoint_stamp, self.checkpoint_at = 0, 0.0, 0.0
        self.history: list[tuple[float, int, float]] = [(0.0, 0, 0.0)]
        """Every durable checkpoint: (stamp, step, running time at the stamp), by stamp."""
        self.hung_since: float | None = None
        """When the job's progress stopped while its pods run; None unless it hangs."""
        self.pods_up = False
        """The pods run (after their start, until they stop)."""
        self.measure_at_checkpoint = True
        self.stop_after_checkpoint = False

    # -- the cluster's side ---------------------------------------------------------------

    def assign(self, rank: int, node: Node) -> None:
        self.unplaced.discard(rank)
        if node.images_at is None:
            node.images_at = self.clock.now + self.image_pull  # its kubelet pulls them now
        self.images_ready = max(self.images_ready, node.images_at)
        self.ranks[rank] = node
        self.rank_of[node.index] = rank
        self.incarnation[rank] += 1
        pod = JobPod(
            f"trainer-{rank}",
            False,
            node.name,
            self.gpus,
            uid=f"trainer-{rank}-{self.incarnation[rank]}",
        )
        self._pods[rank] = pod
        self._pods_read = None

    @property
    def pods(self) -> tuple[JobPod, ...]:
        """The pods as the ledger reads them: the same tuple until a pod changes, so that
        the ledger reads the very same pods for nothing, and a rank placed costs one pod,
        not a copy of all of them."""
        if self._pods_read is None:
            self._pods_read = tuple(self._pods)
        return self._pods_read

    def begin(self) -> None:
        """Start training at time zero on the ranks placed so far (all of them)."""
        self._pods_running()
        self._tick()
        self._resume(self.epoch)

    def vacate(self, node: Node) -> None:
        """The rank on ``node`` has no node any more."""
        rank = self.rank_of.pop(node.index, None)
        if rank is not None:
            self.ranks[rank] = None
            self.unplaced.add(rank)

    def pending(self) -> list[int]:
        return sorted(self.unplaced)

    def set_short(self, short: int) -> None:
        now = self.clock.now
        if self.short and self.state is State.DOWN:
            self.totals.capacity += now - self.short_since
        self.short, self.short_since = short, now

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, value: State) -> None:
        self._account()
        self._state = value

    @property
    def period(self) -> float:
        """Seconds per step at the job's pace."""
        return self.step * self.pace

    def set_pace(self, pace: float) -> None:
        """The slowest rank's pace changed (a rank's node turned slow, was repaired, or
        the rank moved): the steps done and the share of the step under way are kept,
        the rest of it and the steps after it go at the new pace."""
        if pace == self.pace:
            return
        running = self._state is State.RUNNING
        if running:
            self._reanchor()
        self._account()
        self.pace = pace
        self.pace_changes += 1
        if running:
            for kind, step in self.due.items():
                self._expect(kind, step, self.epoch, self._when(step) - self.clock.now)

    def running_time(self) -> float:
        """Seconds the job has run so far (the reports' clock: one per interval)."""
        if self._state is State.RUNNING:
            return self.trained + (self.clock.now - self.since)
        return self.trained

    @property
    def training(self) -> bool:
        return self.state in TRAINING

    @property
    def down(self) -> bool:
        return self.state is State.DOWN

    # -- events ---------------------------------------------------------------------------

    def crash(self, *, planned: bool = False) -> None:
        """A rank died (a fault, an eviction, a bug, a planned stop): every rank stops."""
        if self.state is State.DOWN:
            return
        if self.training:
            self._tick()  # the checkpoints so far, credited before the interruption
            self._stop_pods()
            self._tick()
            self.totals.crashes += not planned
        elif self.pods_up:
            self._stop_pods()
        self.hung_since = None
        self.state = State.DOWN
        self.slow_lost += self.slow_work - self.slow_saved
        self.slow_saved = self.slow_work
        self.epoch += 1
        self.due.clear()
        self.stop_after_checkpoint = False
        self.relaunch()

    def hang(self) -> None:
        """Progress stops while every pod runs, until the NCCL watchdog crashes the job
        (or someone restarts it first: :meth:`crash`)."""
        if not self.training:
            return
        self._freeze()
        self.state = State.HUNG
        self.epoch += 1
        self.due.clear()
        self.clock.after(self.watchdog, self._watchdog, self.epoch)
        if self.hung_since is None:
            self.hung_since = self.clock.now
            self.totals.hangs += 1
            self.hosts.stalled()

    def roll_back(self, before: float) -> None:
        """Silent corruption found: the job must restart from its last checkpoint taken
        before ``before`` (when the corruption began), past the checkpoints since. The
        ledger credited the training up to those as productive and never takes time
        back, so what they held is counted here (``rolled_back``)."""
        index = bisect.bisect_left(self.history, (before,)) - 1
        stamp, step, trained = self.history[max(index, 0)]
        if step >= self.checkpoint_step:
            return
        self.totals.rolled_back += self.history[-1][2] - trained
        del self.history[max(index, 0) + 1 :]
        self.checkpoint_step, self.checkpoint_stamp = step, stamp

    def planned_stop(self) -> None:
        """A planned interruption: the job stops right after its next checkpoint."""
        if self.state in (State.RUNNING, State.PAUSED):
            self.stop_after_checkpoint = True

    def relaunch(self) -> None:
        """The launcher recreates the pods (after the old ones terminated)."""
        if not self.relaunching:
            self.relaunching = True
            self.clock.after(self.termination, self._relaunch)

    def restart_in_place(self) -> None:
        """Pitcrew asked the pods elsewhere to restart in place: the start after the
        crash it is taking a node for (or the one the job is down in) creates only the
        lost pod again."""
        self.in_place_epoch = self.epoch if self.down else self.epoch + 1

    def try_start(self) -> None:
        if self.state is not State.DOWN or self.relaunching or self.unplaced:
            return
        if self.hosts.blocked(self.rank_of):
            return  # crash-looping on a broken node until someone takes it away
        self.set_short(0)
        self.state = State.STARTING
        start = self.replacement_start if self.in_place_epoch == self.epoch else self.pod_start
        # A rank placed on a node without the job's images waits for their pull too.
        wait = start + max(0.0, self.images_ready - self.clock.now)
        if wait > 0:
            self.clock.after(wait, self._started, self.epoch)
        else:
            self._started(self.epoch)

    def day(self, index: int) -> None:
        self._tick()
        self.totals.daily.append(
            (float(index), dict(self.totals.seconds), self._checkpointing_so_far())
        )

    def finish(self) -> None:
        self.totals.checkpointing = self._checkpointing_so_far()
        self.set_short(0)
        self._account()
        self.totals.slowed = self.slow_work - self.slow_lost  # the end credits the rest
        self._tick(finished=True)

    # -- internals ------------------------------------------------------------------------

    def _relaunch(self) -> None:
        self.relaunching = False
        if self.state is not State.DOWN:
            return
        for node in self.hosts.doubtful(self):
            if not self.hosts.keeps(node):
                self.vacate(node)
                self.hosts.release(node)
        self.hosts.fill(self)
        self.try_start()

    def _started(self, epoch: int) -> None:
        """Every pod runs: the restart (process start, NCCL initialisation, checkpoint
        load) takes its time, and a share of restarts fail at its end."""
        if epoch != self.epoch or self.state is not State.STARTING:
            return
        self._pods_running()
        self._tick()
        took, fails = self.restarts.next()
        self.clock.after(took, self._restart_failed if fails else self._resume, epoch)

    def _restart_failed(self, epoch: int) -> None:
        if epoch == self.epoch and self.state is State.STARTING:
            self.crash()

    def _watchdog(self, epoch: int) -> None:
        if epoch == self.epoch and self.state is State.HUNG:
            self.crash()

    def _resume(self, epoch: int) -> None:
        if epoch != self.epoch:
            return
        self.state = State.RUNNING
        self._anchor_at(self.checkpoint_step)
        self.measure_at_checkpoint = True
        self.due.clear()
        self._expect("resumed", self.checkpoint_step + 1, epoch, self.period)
        self._next_checkpoint(epoch, self.checkpoint_step)

    def _resumed(self, epoch: int) -> None:
        if epoch == self.epoch and self.state is State.RUNNING:
            self._tick()  # one step done: the ledger places the resumption from it

    def _next_checkpoint(self, epoch: int, step: int) -> None:
        """The next checkpoint, ``steps_per_checkpoint`` steps after ``step`` (now)."""
        self._expect(
            "checkpoint",
            step + self.steps_per_checkpoint,
            epoch,
            self.steps_per_checkpoint * self.period,
        )

    def _expect(self, kind: str, step: int, epoch: int, delay: float) -> None:
        """Call ``kind``'s handler at the end of ``step``, ``delay`` from now at the
        current pace (a later pace change schedules it again)."""
        self.due[kind] = step
        self.clock.after(delay, self._reached, kind, epoch, self.pace_changes)

    def _reached(self, kind: str, epoch: int, generation: int) -> None:
        if epoch != self.epoch or generation != self.pace_changes or kind not in self.due:
            return
        del self.due[kind]
        if kind == "resumed":
            self._resumed(epoch)
        else:
            self._checkpoint(epoch)

    def _checkpoint(self, epoch: int) -> None:
        if epoch != self.epoch or self.state is not State.RUNNING:
            return
        now = self.clock.now
        if self.measure_at_checkpoint:
            self.measure_at_checkpoint = False
            self._tick()  # two reports within one stretch of training: the step time
        step = self._step_now()
        slow = self._slow_work_now()
        kept = (slow, self.trained)
        if self.blocking:
            self._freeze()
            self.state = State.PAUSED
            self.clock.after(self.cost, self._durable, epoch, step, now + self.cost, kept)
        elif self.stall > 0:
            # Training stops while the state is copied to host memory; the write goes
            # on behind it.
            self._freeze()
            self.state = State.PAUSED
            self.clock.after(self.cost, self._durable, epoch, step, now, kept)
            self.clock.after(self.stall, self._unstalled, epoch, step)
        else:
            self.clock.after(self.cost, self._durable, epoch, step, now, kept)
            self._next_checkpoint(epoch, step)

    def _unstalled(self, epoch: int, step: int) -> None:
        if epoch != self.epoch or self.state is not State.PAUSED:
            return
        self.totals.checkpointing += self.stall
        self.state = State.RUNNING
        self._anchor_at(step)
        self._next_checkpoint(epoch, step)

    def _durable(self, epoch: int, step: int, stamp: float, kept: tuple[float, float]) -> None:
        """The checkpoint is on storage. ``stamp``: the time training restarts from
        (the end of a blocking checkpoint; the snapshot of an asynchronous one);
        ``kept``: the slowed work and the running time up to it."""
        slow, trained = kept
        if epoch != self.epoch:
            return
        now = self.clock.now
        self.checkpoint_step, self.checkpoint_stamp, self.checkpoint_at = step, stamp, now
        self.history.append((stamp, step, trained))
        self.slow_saved = slow
        if self.blocking:
            self.totals.checkpointing += self.cost
            self.state = State.RUNNING
            self._anchor_at(step)
            self._next_checkpoint(epoch, step)
        self.hosts.checkpointed()
        if self.stop_after_checkpoint:
            self.crash(planned=True)

    def _step_now(self) -> int:
        if self.state is not State.RUNNING:
            return self.anchor_step
        done = self.anchor_part + (self.clock.now - self.anchor) / self.period
        return self.anchor_step + int(done + 1e-6)

    def _done_at(self, step: int) -> float:
        """When ``step`` was (or, at the current pace, will be) done."""
        if step <= self.anchor_step:
            return self.anchor_done
        return self._when(step)

    def _when(self, step: int) -> float:
        return self.anchor + (step - self.anchor_step - self.anchor_part) * self.period

    def _anchor_at(self, step: int, when: float | None = None) -> None:
        """Step ``step`` was done at ``when`` (default now) and nothing of the next one
        since: a resume, the end of a blocking checkpoint, a freeze."""
        when = self.clock.now if when is None else when
        self.anchor, self.anchor_step, self.anchor_part, self.anchor_done = when, step, 0.0, when

    def _reanchor(self) -> None:
        """Progress as of now, before the pace changes: the steps done, the time the last
        of them was done, and the share of the step under way."""
        done = self.anchor_part + (self.clock.now - self.anchor) / self.period
        whole = int(done + 1e-6)
        step = self.anchor_step + whole
        self.anchor_done = self._done_at(step)
        self.anchor, self.anchor_step = self.clock.now, step
        self.anchor_part = min(max(0.0, done - whole), 1.0 - 1e-6)

    def _freeze(self) -> None:
        """Progress stops at the last completed step (a blocking checkpoint, a hang):
        the share of the step under way is lost."""
        if self.state is State.RUNNING:
            step = self._step_now()
            self._anchor_at(step, self._done_at(step))

    def _account(self) -> None:
        """Count the running time since the last change of state or pace, and what
        a straggler's pace cost of it."""
        now = self.clock.now
        if self._state is State.RUNNING:
            elapsed = now - self.since
            self.trained += elapsed
            if self.pace > 1.0:
                self.totals.straggling += elapsed
                self.slow_work += elapsed * (1.0 - 1.0 / self.pace)
        self.since = now

    def _slow_work_now(self) -> float:
        self._account()
        return self.slow_work

    def _progress(self) -> Progress | None:
        if not self.training:
            return None
        step = self._step_now()
        when = self._done_at(step) if self.state is State.RUNNING else self.anchor
        return Progress(
            step=step,
            time=at(when),
            checkpoint_step=self.checkpoint_step,
            checkpoint_time=at(self.checkpoint_stamp),
        )

    def _pods_running(self) -> None:
        self.pods_up = True
        self._rebuild(running=True)

    def _stop_pods(self) -> None:
        """Every container exits (the launcher restarts them): a restart each."""
        self.pods_up = False
        self._rebuild(running=False)

    def _rebuild(self, *, running: bool) -> None:
        """Every pod again, now running (started now) or stopped (now, a restart each),
        built column by column: at every restart of a job of thousands of pods, without
        a Python call per pod (``JobPod`` is a tuple of its fields in this order)."""
        now = at(self.clock.now)
        name, _, node, gpus, _, uid, _, restarts, was_started, _, _ = zip(*self._pods, strict=True)
        restarted: Iterable[int] = restarts
        started: Iterable[datetime.datetime | None] = was_started
        stopped: Iterable[datetime.datetime | None] = repeat(now)
        if running:
            started, stopped = repeat(now), repeat(None)
        else:
            restarted = map(add, restarts, repeat(1))
        columns = zip(
            name,
            repeat(running),
            node,
            gpus,
            repeat(None),
            uid,
            repeat(None),
            restarted,
            started,
            stopped,
            repeat(False),
        )
        self._pods = list(map(JobPod._make, columns))
        self._pods_read = None

    def _checkpointing_so_far(self) -> float:
        """Blocking checkpoint time the ledger counts as productive: the finished ones,
        and at the end of the run the one in progress (the end credits it)."""
        if self.state is State.PAUSED:
            return self.totals.checkpointing + (self.clock.now - self.anchor)
        return self.totals.checkpointing

    def _tick(self, *, finished: bool = False) -> None:
        observation = JobObservation(
            pods=self.pods,
            progress=self._progress(),
            out_of_service=self.hosts.out_of_service(),
            size=self.size,
            finished=finished,
        )
        out = self.ledger.tick(observation, at(self.clock.now))
        for category, value in out.seconds.items():
            self.totals.seconds[category] = self.totals.seconds.get(category, 0.0) + value
        for cause in out.interruptions:
            key = "nodeFault" if cause is Cause.NODE_FAULT else "other"
            self.totals.interruptions[key] = self.totals.interruptions.get(key, 0) + 1
