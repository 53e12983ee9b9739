"""A spare reserved for the training job that lost a node, until the job's pod lands there.

A spare exists for the job that loses a node. Released to any work when that node
is taken out (as it once was), it is taken by whatever pod is pending first, and the
job's replacement pod, created only once the drain evicts the old one, waits for
capacity anyway. So when a node that runs a training job is taken out
(:func:`offer_spares`), the oldest spare is *reserved* for that job instead: its
spare taint becomes ``pitcrew.dev/reserved=<job>`` in one edit (the node is never
bare in between), which keeps every other pod off it, and the reserved node's own
decisions (:func:`reserved`) add the matching toleration to the job's pods that wait
for a node. The job is launched as it always was: no Pitcrew label, toleration or
affinity in its template. A taint and a toleration, not node affinity, because a
pending pod's tolerations may grow (the one change to its spec Kubernetes allows)
and its affinity may not; and the scheduler needs no nudge to prefer the spare: it
is the one node with room that the job's pod tolerates and no other pod does.

The reserved node is Healthy (in service, for its job), and the reservation is
status (:class:`pitcrew.api.gpunode.ReservationStatus`), so a new leader goes on
with it. It ends:

- **claimed**: a pod of the job runs on it and none waits; the taint goes and the
  node is an ordinary Healthy node;
- **unclaimed**: ``spares.reservationTimeout`` after a pod of the job was first seen
  waiting for a node, or, if none ever was, that long after the latest the job's
  node drains it (``checkpointMaxDelay`` plus ``drain.timeout`` after the
  reservation: a Suspect node keeps its job to the next checkpoint, and the clock
  must not run out before the job even needs the spare). The node goes back to the
  pool: a spare again where the pool is short of spares (the spare taint replaces
  the reservation in one edit), else capacity for any pod.

A node taken out that runs no training job releases the oldest spare to any work,
as before: nothing identifies what its pods' replacements are.

A spare also serves a training job's pod that waits for capacity for another reason
(a node people cordoned, a job that grew) when no displaced job needs it
(:func:`lend`): held back for faults alone, spares equal to the pool's headroom left
such a job waiting beside idle nodes. The oldest ``spares.keepForDisplaced`` spares
are never lent; each other spare, deciding itself, is reserved for the job that waits
for more nodes than it holds reserved (the job closest to running first: fewest pods
waiting), and from there the reservation runs as above. A pod that tolerates a
reservation no node holds any more (one it did not take in time) is not lent another.
"""

from __future__ import annotations

import datetime
from collections import Counter

from pitcrew.api.gpunode import Phase, ReservationStatus
from pitcrew.api.vocabulary import RESERVED_TAINT, SPARE_TAINT
from pitcrew.core import actions as a
from pitcrew.core.evidence import Finding
from pitcrew.core.job_discovery import taint_value
from pitcrew.core.lifecycle.builder import Builder
from pitcrew.core.lifecycle.facts import elapsed, spares_wanted
from pitcrew.core.lifecycle.service import hold_as_spare
from pitcrew.core.views import NodeView, PodView

__all__ = ["job_of", "lend", "offer_spares", "reservation", "reserved"]


def job_of(pod: PodView) -> str:
    """The training job of ``pod`` as a reservation names it; empty for other pods."""
    return taint_value(pod.namespace, pod.job) if pod.job else ""


def reservation(node: NodeView) -> str:
    """The job ``node`` is reserved for (its reservation taint's value); empty if none."""
    return next((t.value for t in node.taints if t.key == RESERVED_TAINT), "")


def offer_spares(b: Builder, found: Finding) -> None:
    """The spares that stand in for a node in service being taken out: one reserved for
    each training job on it (the job with most pods there first, as long as spares
    last), or, on a node with no training job, the oldest released to any work."""
    spares = [s for s in b.fleet.spares if s != b.node.name]
    if not spares:
        return
    jobs = Counter(job for p in b.node.workload if (job := job_of(p)))
    if not jobs:
        b.actions.append(
            a.ReleaseSpare(node=spares[0], message=f"replacing {b.node.name} ({found.reason})")
        )
        return
    for job, spare in zip(sorted(jobs, key=lambda j: (-jobs[j], j)), spares, strict=False):
        b.actions.append(
            a.ReserveSpare(
                node=spare,
                job=job,
                message=f"reserved for job {job}, which loses {b.node.name} ({found.reason})",
            )
        )


def lend(b: Builder) -> None:
    """Reserve this spare for a training job whose pods wait for capacity, unless it is
    among the spares kept for displaced jobs."""
    keep = b.policy.spec.spares.keep_for_displaced
    if b.node.name not in b.fleet.spares[keep:]:
        return
    wanting = _wanting(b)
    if not wanting:
        return
    job = min(wanting, key=lambda j: (wanting[j], j))
    pods = wanting[job]
    b.set(reservation=ReservationStatus(job=job, since=b.now, waiting_since=b.now))
    message = f"lent to job {job}, whose {pods} pods wait for capacity"
    b.go(Phase.HEALTHY, "SpareLent", message)
    b.actions.append(
        a.SetTaint(
            taint=RESERVED_TAINT,
            value=job,
            reason="SpareLent",
            message=message,
            replaces=SPARE_TAINT,
        )
    )


def _wanting(b: Builder) -> dict[str, int]:
    """The jobs whose pods that wait for capacity, and fit this node, outnumber the
    nodes reserved for them: how many more nodes each waits for."""
    node = b.node
    labels = node.labels
    fits = [
        p
        for p in b.state.waiting
        if (job := job_of(p))
        and (not node.gpus or 0 < p.gpus <= node.gpus)
        and all(labels.get(k) == v for k, v in p.node_selector)
        and (not p.tolerates or b.fleet.reserved.get(job, 0))
    ]
    counts = Counter(job_of(p) for p in fits)
    return {
        job: more for job, n in counts.items() if (more := n - b.fleet.reserved.get(job, 0)) > 0
    }


def reserved(b: Builder) -> bool:
    """Keep, serve or end the node's reservation; True while it holds (the node is kept
    for its job: not a spare, not released)."""
    job = reservation(b.node)
    held = b.status.reservation
    if not job:
        if held is not None:
            b.set(reservation=None)  # the taint is gone (a person, an uncordon): so is it
        return False
    if held is None or held.job != job:
        held = ReservationStatus(job=job, since=b.now)
    here = [p for p in b.node.workload if job_of(p) == job]
    waiting = [p for p in b.state.waiting if job_of(p) == job]
    if here and not waiting:
        b.set(reservation=None)
        b.go(Phase.HEALTHY, "SpareClaimed", f"job {job} runs on the spare reserved for it")
        b.actions.append(
            a.RemoveTaint(
                taint=RESERVED_TAINT,
                reason="SpareClaimed",
                message=f"job {job}'s pod runs here: reservation ended",
            )
        )
        return False
    if waiting and held.waiting_since is None:
        held = held.model_copy(update={"waiting_since": b.now})
    since, limit = _deadline(b, held)
    if elapsed(b, since, limit):
        _unclaimed(b, job, limit)
        return True
    b.set(reservation=held)
    untolerated = tuple(p for p in waiting if p.tolerates != job)
    if untolerated:
        b.actions.append(
            a.Tolerate(
                pods=untolerated,
                taint=RESERVED_TAINT,
                value=job,
                message=f"{len(untolerated)} pods of job {job} may land on spare {b.node.name}",
            )
        )
    return True


def _deadline(b: Builder, held: ReservationStatus) -> tuple[datetime.datetime, datetime.timedelta]:
    """From when, and how long, the reservation waits to be claimed: the timeout from the
    first pod of the job seen waiting; before any did, from the reservation, the timeout
    after the latest the job's node drains it."""
    timeout = b.policy.spec.spares.reservation_timeout
    if held.waiting_since is not None:
        return held.waiting_since, timeout
    drain = b.policy.spec.safety.drain
    return held.since, drain.checkpoint_max_delay + drain.timeout + timeout


def _unclaimed(b: Builder, job: str, limit: datetime.timedelta) -> None:
    """Nobody claimed the reservation in time: back to the pool, a spare again while
    the pool is short of spares, else capacity for any pod."""
    b.set(reservation=None)
    minutes = limit.total_seconds() / 60
    message = f"reservation for job {job} not claimed within {minutes:g} min"
    b.actions.append(a.Record(reason="ReservationExpired", message=message))
    node = b.node
    if len(b.fleet.spares) < spares_wanted(b) and not node.busy and not node.unschedulable:
        hold_as_spare(b, "ReservationExpired", f"{message}; a spare again", replaces=RESERVED_TAINT)
        return
    b.go(Phase.HEALTHY, "ReservationExpired", f"{message}; takes any work")
    b.actions.append(
        a.RemoveTaint(taint=RESERVED_TAINT, reason="ReservationExpired", message=message)
    )
