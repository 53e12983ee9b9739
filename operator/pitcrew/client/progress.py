"""Report a training job's progress to Pitcrew, from rank 0.

Pitcrew measures a job's goodput from its pods (labelled
``pitcrew.dev/job=<name>``) and from one annotation, ``pitcrew.dev/progress``,
on the pod of rank 0: the step it is at, its last checkpoint, and optionally
the model FLOPs per step for MFU. In the training loop::

    from pitcrew.client.progress import ProgressReporter

    reporter = ProgressReporter(flops_per_step=6 * n_params * tokens_per_step)
    start, saved_at = load_checkpoint()
    reporter.resumed(start, saved_at)    # optional: where a restart went back to
    for step in range(start, steps):
        train_step()
        reporter.step(step)              # written at most every 30 s
        if step % 500 == 0:
            save_checkpoint()
            reporter.checkpoint(step)    # written at once

Under Slurm (``SLURM_JOB_ID`` set) the same report is the job's comment, set with
``scontrol update JobId=... Comment=...`` (a job's owner may): Pitcrew reads the
checkpoints of the Slurm jobs on a node it is taking out from there.

Without the client, annotate the pod yourself (any process with ``patch`` on
its own pod, or a human)::

    kubectl annotate pod trainer-0 --overwrite pitcrew.dev/progress=\\
      '{"step": 1200, "time": "2026-12-02T10:00:00Z", "checkpointStep": 1000,
        "checkpointTime": "2026-12-02T09:52:00Z"}'

Every pod of the job also carries a heartbeat, ``pitcrew.dev/heartbeat``, written on
the pod by its own first rank (rank 0's goes with its progress, in the same write):
the pod's rank, the last step and when, the wall time per step since the write
before, a pause the loop announced (``reporter.pause()`` before a checkpoint is
written or an evaluation runs; the next step ends it), when it was written
(``beat``: the hooks write one every ``min_interval`` while the process lives,
stepping or not) and whether training ended (``reporter.finish()``). The operator
reads a job whose ranks all stopped stepping, while its pods run, as hung, and the
rank that stopped reporting first as its cause (:mod:`pitcrew.core.hangs`)::

    {"rank": 8, "step": 1200, "time": "2026-12-02T10:00:00.000000Z", "stepSeconds": 1.9,
     "beat": "2026-12-02T10:00:21.000000Z"}

The reporter never raises into the training loop, and never holds it long: each
write is bounded by :data:`WRITE_TIMEOUT`, and a failed one is logged and tried again
only after a backoff (:data:`RETRY_FIRST`, doubling to :data:`RETRY_MAX`), with the
latest step and checkpoint, so an apiserver or slurmctld that is down costs the loop
one bounded write every few minutes, not a blocking PATCH or a forked ``scontrol`` on
every step. It needs only ``patch`` on pods in its own namespace and finds its pod
from ``POD_NAME``/``POD_NAMESPACE`` (the downward API) or the hostname.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pitcrew.api.errors import PitcrewError
from pitcrew.api.vocabulary import HEARTBEAT_ANNOTATION, PROGRESS_ANNOTATION
from pitcrew.core.hangs import Heartbeat
from pitcrew.core.job_ledger import Progress, RankTime
from pitcrew.slurm.control import Slurm

logger = logging.getLogger(__name__)
Timing = tuple[float, tuple[RankTime, ...]]
"""The median rank's step time and the nodes furthest behind their usual pace
(:meth:`pitcrew.client.ranks.Paces.judge`)."""
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
WRITE_TIMEOUT = 10.0
"""Seconds one write (a PATCH of the pod, an ``scontrol update``) may hold the loop."""
RETRY_FIRST = 5.0
"""Seconds after a failed write before the next is tried; doubled after each failure."""
RETRY_MAX = 300.0
"""The longest wait between tries while writes fail."""


def encode(progress: Progress) -> str:
    fields: dict[str, Any] = {"step": progress.step, "time": _iso(progress.time)}
    if progress.checkpoint_step is not None:
        fields["checkpointStep"] = progress.checkpoint_step
    if progress.checkpoint_time is not None:
        fields["checkpointTime"] = _iso(progress.checkpoint_time)
    for key, value in (
        ("flopsPerStep", progress.flops_per_step),
        ("parameters", progress.parameters),
        ("tokensPerStep", progress.tokens_per_step),
    ):
        if value is not None:
            fields[key] = value
    if progress.step_seconds is not None:
        fields["stepSeconds"] = _microseconds(progress.step_seconds)
    if progress.slowest:
        fields["slowest"] = [_rank_time(r) for r in progress.slowest]
    return json.dumps(fields, separators=(",", ":"))


def _rank_time(rank: RankTime) -> dict[str, Any]:
    fields: dict[str, Any] = {"node": rank.node, "stepSeconds": _microseconds(rank.step_seconds)}
    if rank.usual_seconds is not None:
        fields["usualSeconds"] = _microseconds(rank.usual_seconds)
    return fields


def encode_heartbeat(beat: Heartbeat) -> str:
    fields: dict[str, Any] = {"rank": beat.rank, "step": beat.step, "time": _iso(beat.time)}
    if beat.step_seconds is not None:
        fields["stepSeconds"] = _microseconds(beat.step_seconds)
    if beat.paused_since is not None:
        fields["pausedSince"] = _iso(beat.paused_since)
    if beat.beat is not None:
        fields["beat"] = _iso(beat.beat)
    if beat.finished:
        fields["finished"] = True
    if beat.started is not None:
        fields["started"] = _iso(beat.started)
    return json.dumps(fields, separators=(",", ":"))


def parse_heartbeat(text: str) -> Heartbeat:
    """The heartbeat an annotation says; :class:`MalformedProgressError` if it says none."""
    if len(text) > MAX_BYTES:
        raise MalformedProgressError(
            f"{HEARTBEAT_ANNOTATION} is {len(text)} bytes, over the {MAX_BYTES} Pitcrew reads"
        )
    try:
        raw = json.loads(text)
        return Heartbeat(
            rank=int(raw["rank"]),
            step=int(raw["step"]),
            time=_parse_time(raw["time"]),
            step_seconds=_optional(_seconds, raw.get("stepSeconds")),
            paused_since=_optional(_parse_time, raw.get("pausedSince")),
            beat=_optional(_parse_time, raw.get("beat")),
            finished=raw.get("finished") is True,
            started=_optional(_parse_time, raw.get("started")),
        )
    except KeyError as missing:
        raise MalformedProgressError(f"{HEARTBEAT_ANNOTATION} has no {missing}") from None
    except (ValueError, TypeError, AttributeError) as error:
        raise MalformedProgressError(
            f"{HEARTBEAT_ANNOTATION} is not a heartbeat ({error}): {text:.200}"
        ) from None


MAX_BYTES = 4096
"""The longest annotation read: a report is under 600 bytes, and whoever can patch a
pod must not make the operator parse megabytes every few seconds."""


class MalformedProgressError(PitcrewError, ValueError):
    """An annotation that is no progress report; the message says what is wrong."""


def parse(text: str) -> Progress:
    """The progress an annotation says; :class:`MalformedProgressError` if it says none."""
    if len(text) > MAX_BYTES:
        raise MalformedProgressError(
            f"{PROGRESS_ANNOTATION} is {len(text)} bytes, over the {MAX_BYTES} Pitcrew reads"
        )
    try:
        raw = json.loads(text)
        return Progress(
            step=int(raw["step"]),
            time=_parse_time(raw["time"]),
            checkpoint_step=_optional(int, raw.get("checkpointStep")),
            checkpoint_time=_optional(_parse_time, raw.get("checkpointTime")),
            flops_per_step=_optional(float, raw.get("flopsPerStep")),
            parameters=_optional(int, raw.get("parameters")),
            tokens_per_step=_optional(int, raw.get("tokensPerStep")),
            step_seconds=_optional(_seconds, raw.get("stepSeconds")),
            slowest=_slowest(raw.get("slowest")),
        )
    except KeyError as missing:
        raise MalformedProgressError(f"{PROGRESS_ANNOTATION} has no {missing}") from None
    except (ValueError, TypeError) as error:
        raise MalformedProgressError(
            f"{PROGRESS_ANNOTATION} is not a progress report ({error}): {text:.200}"
        ) from None


def decode(text: str | None) -> Progress | None:
    """The progress an annotation says, or None when it is missing or malformed
    (a hand-written annotation with a typo must not stop the accounting)."""
    if not text:
        return None
    try:
        return parse(text)
    except MalformedProgressError:
        return None


MAX_SLOWEST = 8
"""Nodes a report may name as its slowest: the few a straggler is among, not a census."""


def _microseconds(seconds: float) -> float:
    """A step time as written: to the microsecond, and never under one (a rank whose
    compute timed as 0 must not make the whole report unreadable)."""
    return max(round(seconds, 6), 1e-6) if math.isfinite(seconds) else 1e-6


def _seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"step time {value!r} is not a number of seconds")
    seconds = float(value)
    if not 0 < seconds < float("inf"):
        raise ValueError(f"step time {value!r} is not a positive number of seconds")
    return seconds


def _slowest(value: Any) -> tuple[RankTime, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_SLOWEST:
        raise ValueError(f"slowest must be a list of at most {MAX_SLOWEST} nodes")
    found = []
    for entry in value:
        node = entry.get("node") if isinstance(entry, dict) else None
        if not isinstance(node, str) or not 0 < len(node) <= 253:
            raise ValueError(f"slowest entry {entry!r} names no node")
        usual = _optional(_seconds, entry.get("usualSeconds"))
        found.append(RankTime(node, _seconds(entry.get("stepSeconds")), usual))
    return tuple(found)


def _optional(convert: Callable[[Any], Any], value: Any) -> Any:
    return None if value is None else convert(value)


def _parse_time(value: str) -> datetime.datetime:
    parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class ProgressReporter:
    """Writes rank 0's progress and its pod's heartbeat onto its own pod, rate-limited;
    with ``progress=False``, the heartbeat of another pod's first rank only."""

    def __init__(
        self,
        *,
        pod: str | None = None,
        namespace: str | None = None,
        min_interval: float = 30.0,
        flops_per_step: float | None = None,
        parameters: int | None = None,
        tokens_per_step: int | None = None,
        api: Any = None,
        clock: Callable[[], datetime.datetime] = _now,
        slurm_job: str | None = None,
        timer: Callable[[], float] = time.monotonic,
        rank: int = 0,
        progress: bool = True,
    ) -> None:
        self.pod = pod or os.environ.get("POD_NAME") or socket.gethostname()
        self.namespace = namespace or os.environ.get("POD_NAMESPACE") or _own_namespace()
        self.min_interval = min_interval
        self.model = (flops_per_step, parameters, tokens_per_step)
        self.clock = clock
        self.wall = clock
        """The clock a heartbeat's ``beat`` (when it is written) is read from."""
        self.timer = timer
        """Seconds, for the rate limit and the backoff (a monotonic clock)."""
        self._api = api
        self._next_write = -float("inf")
        """When the next write may be tried: ``min_interval`` after one that landed,
        the backoff after one that failed."""
        self._failures = 0
        self._checkpoint: tuple[int, datetime.datetime] | None = None
        self._step = 0
        self._ranks: Timing | None = None
        self.rank = rank
        self.progress = progress
        """Whether this reporter writes the job's progress (rank 0), not only a heartbeat."""
        self._paced: tuple[int, datetime.datetime] | None = None
        """The step and time of the last heartbeat written, to measure the step time from."""
        self._step_seconds: float | None = None
        self._paused: datetime.datetime | None = None
        self._finished = False
        self._began = clock()
        """When this training process started (its reporter was made)."""
        self.slurm_job = slurm_job or os.environ.get("SLURM_JOB_ID") or ""
        """Under Slurm the report goes into the job's comment (``scontrol update``),
        where Pitcrew reads the checkpoints of a node's Slurm jobs."""

    def step(self, step: int, *, ranks: Timing | None = None) -> bool:
        """Record the step reached; writes when ``min_interval`` has passed. True if written.

        ``ranks``: the median step time and the nodes furthest behind their usual pace,
        gathered from every rank
        (:mod:`pitcrew.client.distributed` does it). Sent once, with the next write."""
        if step != self._step:
            self._paused = None  # a new step ends the pause; the same one written again does not
        self._step = step
        if ranks is not None:
            self._ranks = ranks
        if self.timer() < self._next_write:
            return False
        return self._write()

    def pause(self) -> bool:
        """Training stops stepping on purpose (a checkpoint being written, an evaluation)
        until its next step: a stall meanwhile is no hang (up to the policy's
        ``hangs.maxPause``). Written at once, like a checkpoint. True if written."""
        self._paused = self.clock()
        self._paced = None  # the pause is no step time
        if self._failures and self.timer() < self._next_write:
            return False
        return self._write()

    def flops(self, flops_per_step: float) -> None:
        """The model FLOPs per step, where the framework measures them as it goes."""
        _, parameters, tokens = self.model
        self.model = (flops_per_step, parameters, tokens)

    def checkpoint(self, step: int) -> bool:
        """Record a finished checkpoint at ``step``; written at once, or, while writes
        fail, with the first write after the backoff."""
        self._step = max(self._step, step)
        self._checkpoint = (step, self.clock())
        if self._failures and self.timer() < self._next_write:
            return False
        return self._write()

    def resumed(self, step: int, saved_at: datetime.datetime) -> None:
        """Record the checkpoint a restarted job loaded: its step and when it was saved.
        The next reports carry it, so Pitcrew knows from the first report after a
        restart that the job checkpoints and where it went back to. Not written by
        itself (the next step is)."""
        self._step = max(self._step, step)
        self._checkpoint = (step, saved_at)

    def start(self) -> bool:
        """A new training process: its pod's heartbeat says when it started, before its
        first step, so workers restarted inside their pod are starting, not hung, while
        they load. Only the heartbeat is written (no progress). True if written."""
        return self._write(progress=False)

    def finish(self) -> bool:
        """Training ended: the process may run on without steps (a last evaluation, an
        upload) and is no hang. Written at once. True if written."""
        self._finished = True
        return self._write()

    def _heartbeat(self, now: datetime.datetime) -> Heartbeat:
        """This pod's heartbeat, its step time measured since the last one written."""
        paced = self._paced
        if paced is not None and self._step > paced[0] and now > paced[1]:
            self._step_seconds = (now - paced[1]).total_seconds() / (self._step - paced[0])
        return Heartbeat(
            rank=self.rank,
            step=self._step,
            time=now,
            step_seconds=self._step_seconds,
            paused_since=self._paused,
            beat=self.wall(),
            finished=self._finished,
            started=self._began,
        )

    def _write(self, *, progress: bool = True) -> bool:
        flops, parameters, tokens = self.model
        report = Progress(
            step=self._step,
            time=self.clock(),
            checkpoint_step=self._checkpoint[0] if self._checkpoint else None,
            checkpoint_time=self._checkpoint[1] if self._checkpoint else None,
            flops_per_step=flops,
            parameters=parameters,
            tokens_per_step=tokens,
            step_seconds=self._ranks[0] if self._ranks else None,
            slowest=self._ranks[1] if self._ranks else (),
        )
        beat = self._heartbeat(report.time)
        annotations = {HEARTBEAT_ANNOTATION: encode_heartbeat(beat)}
        if self.progress and progress:
            annotations[PROGRESS_ANNOTATION] = encode(report)
        try:
            if self.slurm_job and progress:
                Slurm(timeout=WRITE_TIMEOUT).comment(self.slurm_job, encode(report))
            elif self.slurm_job:
                return True  # under Slurm the heartbeat has no pod to go on
            else:
                self.core().patch_namespaced_pod(
                    self.pod,
                    self.namespace,
                    {"metadata": {"annotations": annotations}},
                    _request_timeout=WRITE_TIMEOUT,
                )
        except Exception:  # the training loop must never die for a report
            self._failures += 1
            wait = min(RETRY_FIRST * 2 ** (self._failures - 1), RETRY_MAX)
            self._next_write = self.timer() + wait
            where = f"Slurm job {self.slurm_job}" if self.slurm_job else f"pod {self.pod}"
            logger.warning(
                "could not report progress on %s (%d in a row); next try in %.0fs",
                where,
                self._failures,
                wait,
                exc_info=True,
            )
            return False
        self._failures = 0
        self._paced = None if self._paused else (beat.step, beat.time)
        self._next_write = self.timer() + self.min_interval
        self._ranks = None  # one gathering counts in one report, never twice
        return True

    def core(self) -> Any:
        """The ``CoreV1Api`` this reporter writes its pod with, made on first use (the
        restart watcher reads the pod with it too)."""
        if self._api is None:
            from kubernetes import client, config  # noqa: PLC0415 - only when reporting

            try:
                config.load_incluster_config()
            except config.ConfigException:
                # The client reads KUBECONFIG when it is imported, not when called.
                config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
            self._api = client.CoreV1Api()
        return self._api


def _own_namespace() -> str:
    try:
        return SA_NAMESPACE.read_text().strip()
    except OSError:
        return "default"
