"""Which training job is hung, and on whom to blame it: decided without I/O.

A synchronous job steps together: a rank that stops (a GPU that stops answering, a
NIC that drops packets, a deadlock in the data loader) holds every other rank in its
next collective. Nothing crashes; the NCCL watchdog ends the job after its timeout
(ten minutes by default), every GPU of the job idle meanwhile. Each pod's heartbeat
(``pitcrew.dev/heartbeat``, written by the framework hooks from a thread of their
own, :mod:`pitcrew.client.progress`) says the last step its ranks finished and when,
so the operator sees the stall as soon as it outlasts the job's own rhythm:

- **Stalled**: every pod of the job runs (none pending, none terminating: a job
  being started or restarted is not stepping, and not hung) and no rank finished a
  step for ``stepTimeMultiple`` times the job's recent step time (the median of the
  pods' own measure), and at least ``minStall``: the hooks write every few seconds
  at most, so a shorter stall may be a heartbeat not written yet.
- **Paused, not hung**: a rank announced a pause (a checkpoint being written, an
  evaluation: no step is expected meanwhile), for at most ``maxPause``.
- **Warming up, not judged**: no pod has measured a step time yet (the first steps
  compile and load; how long they take says nothing), or a pod's containers or its
  training process started after the job's last step (restarted: starting, not
  stepping yet).

Blame, in the order of the evidence's strength:

1. the node of the rank that **stopped reporting first**: the hooks write a heartbeat
   every few seconds while the process lives, stepping or not, so a rank whose
   process froze (a GPU driver stuck in the kernel, a host hung) falls silent while
   the ranks waiting for it in a collective go on reporting (every 15 s while no step
   comes): of the pods silent for half the stall bound, while another pod is not, the
   one silent longest;
2. else the node of the rank that **stopped first**: a pod whose last step is behind
   the others' (a rank that never finished a step the others finished), when those
   pods are on one node;
3. else the job's nodes with a failing check (an application Xid alone takes no node
   out, beside a hang it is the cause);
4. else the job's known **stragglers**;
5. else nobody: no node is taken out, the job is still restarted.

A job whose training ended (a rank said so) is not judged: its process may go on
without steps.

The heartbeats are written by the tenant's own code on its own pods, so they are
trusted only about the job's own pods and nodes: at worst a tenant restarts its own
job and takes out a node its job runs on, which it could hang by itself anyway.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pitcrew.api.policy import HangSpec


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    """One pod's heartbeat: what its ranks last did."""

    rank: int
    """The global rank of the pod's first rank."""
    step: int
    """The last step its ranks finished."""
    time: datetime.datetime
    """When they finished it (the training process's clock)."""
    step_seconds: float | None = None
    """Wall seconds per step over the steps before it; None until measured."""
    paused_since: datetime.datetime | None = None
    """Training announced a pause (a checkpoint, an evaluation) at this time; it ends
    with the next step."""
    beat: datetime.datetime | None = None
    """When this heartbeat was written: the hooks write one every few seconds while the
    process lives, stepping or not, so a rank whose process froze (a GPU driver stuck,
    a host hung) stops reporting while the ranks waiting for it go on."""
    finished: bool = False
    """Training ended: the process may run on (a last evaluation, an upload) without steps."""
    started: datetime.datetime | None = None
    """When the training process writing it started: workers restarted inside their pod
    (``torchrun --max-restarts``) say so before their first step."""

    @property
    def reported(self) -> datetime.datetime:
        return self.beat or self.time


@dataclass(frozen=True, kw_only=True)
class RankPod:
    """A pod of the job as the rule reads it."""

    key: str
    """``namespace/name``."""
    node: str
    running: bool
    """Phase Running and not being deleted."""
    heartbeat: Heartbeat | None = None
    started_at: datetime.datetime | None = None
    """When its containers last started: a container restarted in its pod (a restart
    policy of OnFailure) keeps the pod's annotations, the heartbeat of its last life."""


class Blame(StrEnum):
    """On what evidence a hang was blamed: the reason label of ``pitcrew_job_hangs_total``."""

    SILENT_FIRST = "StoppedReporting"
    STOPPED_FIRST = "StoppedFirst"
    FINDING = "NodeFinding"
    STRAGGLER = "Straggler"
    NOBODY = "Unlocalised"


@dataclass(frozen=True, kw_only=True)
class Hang:
    job: str
    last_step: datetime.datetime
    """When the job's last step finished (the latest heartbeat of any rank)."""
    blame: Blame
    culprits: Mapping[str, str]
    """Nodes to take out, each with the sentence it is taken out with."""
    message: str


@dataclass(frozen=True)
class Verdict:
    hang: Hang | None = None
    wake_at: datetime.datetime | None = None
    """When the job would be hung if nothing changes: the next time to look."""


def judge(
    job: str,
    pods: Sequence[RankPod],
    spec: HangSpec,
    *,
    now: datetime.datetime,
    findings: Mapping[str, str],
    stragglers: Mapping[str, str],
) -> Verdict:
    """Whether ``job`` is hung now. ``findings``: nodes with a failing check, each with
    the check's reason; ``stragglers``: nodes a job's reports name its straggler. Only
    the job's own nodes are read from either."""
    beats = [(p, p.heartbeat) for p in pods if p.heartbeat is not None]
    if not spec.enabled or not pods or not beats or not all(p.running for p in pods):
        return Verdict()
    if any(b.finished for _, b in beats):
        return Verdict()
    measured = [b.step_seconds for _, b in beats if b.step_seconds is not None]
    if not measured:
        return Verdict()  # warming up
    step_time = statistics.median(measured)
    stall = max(spec.min_stall, datetime.timedelta(seconds=spec.step_time_multiple * step_time))
    last = max(b.time for _, b in beats)
    if any(p.started_at is not None and p.started_at > last for p in pods) or any(
        b.started is not None and b.started >= last for _, b in beats
    ):
        return Verdict()  # restarted since the last step: starting, not stepping yet
    due = last + stall
    paused = [b.paused_since for _, b in beats if b.paused_since is not None]
    if paused:
        due = max(due, max(paused) + spec.max_pause)
    if now < due:
        return Verdict(wake_at=due)
    idle = (now - last).total_seconds()
    silent_since = now - stall / 2
    blame, culprits = _blame(beats, pods, silent_since, findings, stragglers)
    told = f"job {job} hung: no rank stepped for {idle:.0f}s ({step_time:.3g}s a step)"
    return Verdict(
        hang=Hang(
            job=job,
            last_step=last,
            blame=blame,
            culprits={node: f"{told}; {why}" for node, why in culprits.items()},
            message=f"{told}; {_said(blame, culprits)}",
        )
    )


def _blame(
    beats: Sequence[tuple[RankPod, Heartbeat]],
    pods: Sequence[RankPod],
    silent_since: datetime.datetime,
    findings: Mapping[str, str],
    stragglers: Mapping[str, str],
) -> tuple[Blame, dict[str, str]]:
    silent = [(p, b) for p, b in beats if b.reported < silent_since]
    if silent and len(silent) < len(beats):
        pod, beat = min(silent, key=lambda pb: (pb[1].reported, pb[1].rank))
        newest = max(b.reported for _, b in beats)
        why = (
            f"rank {beat.rank} (pod {pod.key}) stopped reporting first: its last heartbeat "
            f"{(newest - beat.reported).total_seconds():.0f}s before the others' latest"
        )
        return Blame.SILENT_FIRST, {pod.node: why}
    lowest = min(b.step for _, b in beats)
    highest = max(b.step for _, b in beats)
    behind = [(p, b) for p, b in beats if b.step == lowest]
    if lowest < highest and len({p.node for p, _ in behind}) == 1:
        pod, beat = min(behind, key=lambda pb: (pb[1].time, pb[1].rank))
        why = (
            f"rank {beat.rank} (pod {pod.key}) stopped first, at step {lowest}, "
            f"while others reached step {highest}"
        )
        return Blame.STOPPED_FIRST, {pod.node: why}
    nodes = sorted({p.node for p in pods if p.node})
    found = {n: f"its failing check {findings[n]}" for n in nodes if n in findings}
    if found:
        return Blame.FINDING, found
    slow = {n: stragglers[n] for n in nodes if n in stragglers}
    if slow:
        return Blame.STRAGGLER, slow
    return Blame.NOBODY, {}


def _said(blame: Blame, culprits: Mapping[str, str]) -> str:
    if blame is Blame.NOBODY:
        return "no rank stopped first and no node of it has a finding: no node is blamed"
    return "; ".join(f"{node}: {why}" for node, why in sorted(culprits.items()))
