"""Progress, checkpoints and stragglers from a ``torch.distributed`` job: one object,
one call a step.

Every rank makes a :class:`TrainingReporter`; only rank 0 writes to Kubernetes::

    from pitcrew.client.distributed import TrainingReporter

    pitcrew = TrainingReporter(model, tokens_per_step=batch * seq_len)
    for step in range(start, steps):
        loss = model(batch).loss      # the forward pass is timed by hooks on ``model``
        loss.backward(); optimizer.step()
        pitcrew.step(step)
        if step % 500 == 0:
            save_checkpoint()
            pitcrew.checkpoint(step)

A synchronous job waits for its slowest rank at every collective, so the wall time
of a step is the same on every rank. What tells the straggler is each rank's own
compute: the forward pass (hooks on the module, with CUDA events on a GPU, so
nothing synchronises the stream), or any block wrapped in :meth:`compute`. A
collective inside what is timed is a wait, not compute: the rank that reaches it first
waits there for the slowest, and so looks as slow as the straggler, which then hides
(measured with two CPU ranks under FSDP: 0.40 s and 0.42 s a step, the slow rank's
0.2 s sleep in both). The hooks leave out each FSDP unit's parameter all-gather
(:meth:`ComputeTimer.exclude`); DDP's forward pass has no collective (its gradient
all-reduce is in the backward pass, not timed); any other collective in the forward
pass (tensor parallelism's) is timed: time the compute between them with
:meth:`compute` instead. Every
few steps, all ranks gather their compute and wall time per step with **one**
``all_gather`` of two floats per rank, and rank 0 reports the median and the nodes
furthest behind their own usual pace (:class:`pitcrew.client.ranks.Paces`): ranks of
a pipeline's stages or of MoE experts differ by design, and a job can name each
rank's role (``role=``, or ``PITCREW_ROLE``: the pipeline stage, the expert group) so
that a rank is judged against its peers of that role too. The next gathering comes
after ``min_interval`` seconds' worth of steps, counted from the gathered wall
times, which every rank holds alike: the ranks agree on when to gather without a
word more.

Every pod's first rank (``LOCAL_RANK`` 0, as ``torchrun`` sets it; every rank
where it is unset) writes its pod's heartbeat (``pitcrew.dev/heartbeat``) the same
way, from a thread of its own: the operator sees a job whose ranks all stopped
stepping as hung, and which rank stopped reporting first (:mod:`pitcrew.core.hangs`).
Call :meth:`TrainingReporter.pause` before a checkpoint is written or an evaluation
runs, so the pause is not read as a hang, and :meth:`TrainingReporter.flush` when
training ends.

Node names come from ``NODE_NAME`` (the downward API's ``spec.nodeName``) or the
hostname, gathered once with the roles. Nothing here raises into the training loop, and no step
waits on Kubernetes: rank 0 writes from a thread of its own
(:class:`~pitcrew.client.background.BackgroundReporter`), and a failed write or
gathering is logged and the next one tried. A job that restarted from a checkpoint
says so with :meth:`TrainingReporter.resumed`; :meth:`TrainingReporter.flush` at the
end of training writes what is left.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec

from pitcrew.client.background import BackgroundReporter
from pitcrew.client.progress import ProgressReporter, Timing
from pitcrew.client.ranks import Paces
from pitcrew.client.restart import RestartWatcher

try:
    import torch
    import torch.distributed as dist
    from torch.distributed import fsdp
except ImportError as missing:
    raise ImportError(
        f"pitcrew.client.distributed needs PyTorch: pip install torch ({missing})"
    ) from missing

logger = logging.getLogger(__name__)
P = ParamSpec("P")
FIRST_GATHER = 10
"""Steps before the first gathering: step times settle after the first few."""
WRITE_WAIT = 10.0
"""Seconds the end of training waits for the last reports to be written."""


def _heartbeats() -> bool:
    """Whether this rank, not rank 0, writes its pod's heartbeat: it is its pod's first
    rank, and the job runs in Kubernetes pods (under Slurm the report is the job's
    comment, which only rank 0 writes)."""
    return os.environ.get("LOCAL_RANK", "0") == "0" and not os.environ.get("SLURM_JOB_ID")


def guarded(hook: Callable[P, None]) -> Callable[P, None]:
    """A framework hook that logs its failures instead of raising them into training."""

    @functools.wraps(hook)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            hook(*args, **kwargs)
        except Exception:  # a report is never worth a training run
            logger.warning("Pitcrew's %s failed; training goes on", hook.__name__, exc_info=True)

    return run


class Stopwatch:
    """Seconds between starts and stops; CUDA events on a GPU (read only at the next
    gathering, when they have long completed, so nothing synchronises the stream)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started: Any = None
        self._events: list[tuple[Any, Any]] = []

    @property
    def running(self) -> bool:
        return self._started is not None

    def start(self) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self._started = torch.cuda.Event(enable_timing=True)
            self._started.record()
        else:
            self._started = time.perf_counter()

    def stop(self) -> None:
        started, self._started = self._started, None
        if started is None:
            return
        if isinstance(started, float):
            self.seconds += time.perf_counter() - started
            return
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self._events.append((started, end))

    def take(self) -> float:
        """The seconds since the last call (``nan`` if nothing was timed)."""
        for started, end in self._events:
            end.synchronize()
            self.seconds += started.elapsed_time(end) / 1000
        timed = bool(self._events) or self.seconds > 0
        seconds, self.seconds, self._events = self.seconds, 0.0, []
        return seconds if timed else math.nan


class ComputeTimer:
    """Seconds of this rank's own compute, from hooks or blocks: what is timed, less
    the time spent in FSDP's parameter all-gathers inside it (:meth:`exclude`)."""

    def __init__(self) -> None:
        self.compute = Stopwatch()
        self.waiting = Stopwatch()
        """The all-gathers: a rank that reaches one first waits there for the slowest,
        and without this the fast ranks' forward passes took as long as the straggler's."""

    def start(self) -> None:
        self.compute.start()

    def stop(self) -> None:
        self.compute.stop()

    def exclude(self, module: torch.nn.Module) -> None:
        """Leave out of the compute the parameter all-gather of every FSDP unit in
        ``module`` (FSDP's ``FullyShardedDataParallel``, whose forward gathers before
        it calls the module it wraps, and ``fully_shard``'s units, which gather in a
        forward pre-hook): from the unit's first pre-hook to the point its own
        compute begins. Prepended, so the wait is timed however the hooks were added;
        counted only inside the compute timed (a forward recomputed in the backward,
        under activation checkpointing, is neither)."""
        fully_shard = getattr(fsdp, "FSDPModule", None)  # torch >= 2.6
        for unit in module.modules():
            if isinstance(unit, fsdp.FullyShardedDataParallel):
                unit.register_forward_pre_hook(self._wait, prepend=True)
                unit.module.register_forward_pre_hook(lambda *_: self.waiting.stop())
            elif fully_shard is not None and isinstance(unit, fully_shard):
                unit.register_forward_pre_hook(self._wait, prepend=True)
                unit.register_forward_pre_hook(lambda *_: self.waiting.stop())

    def _wait(self, *_: object) -> None:
        if self.compute.running:
            self.waiting.start()

    def take(self) -> float:
        """The compute since the last call (``nan`` if nothing was timed)."""
        compute, waiting = self.compute.take(), self.waiting.take()
        return compute - waiting if not math.isnan(waiting) else compute


class TrainingReporter:
    def __init__(
        self,
        model: torch.nn.Module | None = None,
        *,
        min_interval: float = 30.0,
        flops_per_step: float | None = None,
        parameters: int | None = None,
        tokens_per_step: int | None = None,
        node: str | None = None,
        role: str | None = None,
        group: Any = None,
        reporter: ProgressReporter | None = None,
    ) -> None:
        self.distributed = dist.is_available() and dist.is_initialized()
        self.group = group
        self.rank = dist.get_rank(group) if self.distributed else 0
        self.world = dist.get_world_size(group) if self.distributed else 1
        self.node = node or os.environ.get("NODE_NAME") or socket.gethostname()
        self.role = role if role is not None else os.environ.get("PITCREW_ROLE", "")
        self.min_interval = min_interval
        self.reporter = reporter
        if reporter is None and (self.rank == 0 or _heartbeats()):
            self.reporter = BackgroundReporter(
                rank=self.rank,
                progress=self.rank == 0,
                min_interval=min_interval,
                flops_per_step=flops_per_step,
                parameters=parameters
                if parameters is not None or model is None
                else sum(p.numel() for p in model.parameters()),
                tokens_per_step=tokens_per_step,
            )
        if self.reporter is not None:
            self.reporter.start()  # a new process: starting, not hung, until it steps
        self.restarts: RestartWatcher | None = None
        """Exits this process when Pitcrew asks its pod to restart in place (the pod's
        first rank watches, where the pod declares a ``RestartAllContainers`` rule)."""
        if self.reporter is not None and not self.reporter.slurm_job:
            self.restarts = RestartWatcher(
                pod=self.reporter.pod, namespace=self.reporter.namespace, core=self.reporter.core
            )
            self.restarts.start()
        self.timer = ComputeTimer()
        self.every = FIRST_GATHER
        self.paces: Paces | None = None
        """Rank 0's judge of every rank's pace, once the ranks' nodes and roles are known."""
        self._steps = 0
        self._since = time.perf_counter()
        if model is not None:
            self.watch(model)

    def watch(self, module: torch.nn.Module) -> None:
        """Time every forward pass of ``module`` as this rank's compute, less its FSDP
        all-gathers (wrap the model in FSDP first)."""
        self.timer.exclude(module)
        module.register_forward_pre_hook(lambda *_: self.timer.start(), prepend=True)
        module.register_forward_hook(lambda *_: self.timer.stop())

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        """Time a block as this rank's compute: one that waits on no other rank."""
        self.timer.start()
        try:
            yield
        finally:
            self.timer.stop()

    def step(self, step: int) -> None:
        """The step just finished. Every rank calls it, every step."""
        self._steps += 1
        ranks = self._gather() if self._steps >= self.every else None
        if self.reporter is not None:
            self.reporter.step(step, ranks=ranks if self.rank == 0 else None)

    def pause(self) -> None:
        """Training stops stepping on purpose until the next step: a checkpoint is about
        to be written, an evaluation to run (any rank may call it)."""
        if self.reporter is not None:
            self.reporter.pause()

    def checkpoint(self, step: int) -> None:
        """A checkpoint at ``step`` is saved (written by rank 0 at once)."""
        if self.reporter is not None:
            self.reporter.checkpoint(step)

    def flops(self, flops_per_step: float) -> None:
        if self.reporter is not None:
            self.reporter.flops(flops_per_step)

    def resumed(self, step: int, saved_at: datetime.datetime) -> None:
        """The job restarted from the checkpoint of ``step``, saved at ``saved_at``: the
        next report says where it went back to (every rank may call it; rank 0 tells)."""
        if self.reporter is not None:
            self.reporter.resumed(step, saved_at)

    def flush(self, timeout: float = WRITE_WAIT) -> None:
        """At the end of training: say so on this rank's heartbeat (the process may run
        on without steps, and is no hang), and wait at most ``timeout`` seconds for the
        last reports to be written."""
        if self.restarts is not None:
            self.restarts.stop()  # training ended: nothing left to restart for
        if self.reporter is not None:
            self.reporter.finish()
        if isinstance(self.reporter, BackgroundReporter):
            self.reporter.flush(timeout)

    def _gather(self) -> Timing | None:
        now = time.perf_counter()
        wall = (now - self._since) / self._steps
        compute = self.timer.take() / self._steps
        self._since, self._steps = now, 0
        try:
            gathered = self._all_gather(compute if not math.isnan(compute) else wall, wall)
        except Exception:  # a broken group fails training by itself, not through us
            logger.warning("could not gather the ranks' step times", exc_info=True)
            return None
        # Every rank holds the same walls: they agree on the next gathering.
        slowest_wall = max(w for _, w in gathered)
        self.every = max(1, math.ceil(self.min_interval / slowest_wall)) if slowest_wall else 1
        if self.reporter is None or self.paces is None or len(self.paces.nodes) != len(gathered):
            return None  # only rank 0 reports, and so judges
        return self.paces.judge([c for c, _ in gathered])

    def _all_gather(self, compute: float, wall: float) -> list[tuple[float, float]]:
        if not self.distributed or self.world == 1:
            if self.paces is None:
                self.paces = Paces([self.node], [self.role] if self.role else ())
            return [(compute, wall)]
        if self.paces is None:
            names: list[Any] = [None] * self.world
            dist.all_gather_object(names, (self.node, self.role), group=self.group)
            roles = [str(role or "") for _, role in names]
            self.paces = Paces([str(n or "") for n, _ in names], roles if any(roles) else ())
        cuda = dist.get_backend(self.group) == "nccl"
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        mine = torch.tensor([compute, wall], dtype=torch.float64, device=device)
        out = [torch.zeros_like(mine) for _ in range(self.world)]
        dist.all_gather(out, mine, group=self.group)
        return [(float(t[0]), float(t[1])) for t in out]
