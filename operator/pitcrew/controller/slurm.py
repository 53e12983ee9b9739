"""Slurm's nodes as the decisions see them: polled with ``scontrol``, mapped to
Kubernetes nodes, and the jobs of the nodes Pitcrew is taking out.

Slurm has no watch a client may use, so its nodes are read every ``interval``
seconds on a thread of their own (one ``scontrol`` call for the whole cluster);
a Slurm node whose state or reason changed wakes the Kubernetes node it belongs
to, so a drain that Slurm has finished is acted on at once, not at the resync.
Jobs are read only for the Slurm nodes whose Kubernetes node Pitcrew is taking
out (a few at a time, bounded by ``maxConcurrentDrains``): their comments carry
the jobs' progress reports, and so their checkpoints. A checkpoint is dated by when
this watch saw the comment's checkpoint change, by the operator's clock, never by the
time the node's clock wrote into it (as the store dates pods' checkpoints): one the
job already had when first read, after the node was taken out, counts as older than
any take-out, so a Suspect node waits for the job's next one.

A Kubernetes node is matched to a Slurm node by name (:func:`pitcrew.core.slurm.matches`:
the exact name, else the one short or long form of it), and each Slurm name to the
Kubernetes nodes that claim it; a claim is dropped when its node is deleted or no
longer decided as a Slurm node (:meth:`SlurmWatch.forget`), so the node that
replaces it is not a second claimant for ever.

A node whose Slurm state cannot be known now gets a
:class:`~pitcrew.core.views.SlurmUnreadable` view, never "no Slurm node": Slurm out of
reach or slow past :attr:`SlurmWatch.stale_after` (slurmctld restarting, the client
missing), an entry of its name that does not parse, a name that stands for two Slurm
nodes or is claimed by two Kubernetes nodes, a slurmd pod naming a node Slurm does not
list. The lifecycle then drains and resumes nothing in Slurm, and a drain waits for
it up to its timeout (:mod:`pitcrew.core.lifecycle.slurm`). The nodes are published as
soon as they are read, before any job is, and job reads stop after ``interval`` (the
rest go first in the next poll), so a slow ``squeue`` never ages the node view.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from pitcrew.api.policy import SlurmSpec
from pitcrew.client.progress import decode
from pitcrew.core.convert import EPOCH
from pitcrew.core.slurm import Read, by_short_name, matches, slurm_name
from pitcrew.core.views import SlurmJobView, SlurmNodeView, SlurmUnreadable
from pitcrew.slurm.control import Slurm, SlurmError

logger = logging.getLogger(__name__)


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class SlurmWatch:
    def __init__(
        self,
        slurm: Slurm,
        *,
        interval: float,
        wake: Callable[[Iterable[str]], None],
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] = _utc_now,
    ) -> None:
        self.slurm = slurm
        self.interval = interval
        self.wake = wake
        self.clock = clock
        self.now = now
        """The operator's wall clock: what dates the jobs' checkpoints it sees."""
        self._checkpoints: dict[str, tuple[datetime.datetime | None, datetime.datetime | None]]
        self._checkpoints = {}
        """Slurm job -> its checkpoint as its comment says (the node's clock, compared
        with nothing but itself; None: none yet) and when this watch saw it change (the
        operator's clock)."""
        self.stale_after = 2 * (interval + slurm.timeout)
        """Age past which a read is no view: a poll is one ``scontrol`` call (at most
        ``timeout``), at most ``interval`` of job reads and one more call, then a wait
        of ``interval``; older than that, slurmctld stopped answering."""
        self._lock = threading.Lock()
        self._read = Read[dict[str, SlurmNodeView]]({})
        self._listed: set[str] = set()
        """Every name in the read: its nodes and the entries that did not parse."""
        self._dotted: dict[str, tuple[str, ...]] = {}
        self._jobs: dict[str, tuple[SlurmJobView, ...]] = {}
        self._read_at: float | None = None
        self._failure = ""
        """Why the last poll failed; empty once one succeeds."""
        self._names: dict[str, str] = {}
        """Kubernetes node -> the Slurm name it was last matched to ("" for none)."""
        self._claims: dict[str, set[str]] = {}
        """Slurm name -> the Kubernetes nodes that claim it."""
        self._wanted: set[str] = set()
        """Slurm names whose jobs to read: nodes Pitcrew is taking out."""
        self._turn = 0
        self._woke_stale = False
        """Whether the nodes were woken since the read went stale."""
        """Where the next poll starts reading jobs, when one poll cannot read them all."""
        self._said: set[str] = set()
        self.poked = threading.Event()

    # -- what a decision asks -------------------------------------------------------------

    def view(
        self, node: str, pods: Iterable[Mapping[str, Any]], spec: SlurmSpec, *, taking_out: bool
    ) -> tuple[SlurmNodeView | SlurmUnreadable | None, str]:
        """Kubernetes node ``node``'s Slurm node and its slurmd pod's key. The Slurm node
        is :class:`SlurmUnreadable` when its state cannot be known now (:meth:`_match`
        says why); None only when a fresh, whole read lists no node of its name and no
        slurmd pod names one."""
        candidate, slurmd = slurm_name(node, pods, spec)
        with self._lock:
            found = self._match(node, candidate, slurmd)
            if found is not None and found.name and taking_out:
                self._wanted.add(found.name)  # read once Slurm is, if it is not now
            elif found is not None and found.name:
                self._wanted.discard(found.name)
            if not isinstance(found, SlurmNodeView):
                return found, slurmd
            jobs = self._jobs.get(found.name)
        return (replace(found, jobs=jobs) if jobs is not None else found), slurmd

    def _match(
        self, node: str, candidate: str, slurmd: str
    ) -> SlurmNodeView | SlurmUnreadable | None:
        """Under the lock: the Slurm node ``candidate`` stands for, claimed by ``node``."""
        why = "" if candidate else f"slurmd pod {slurmd} names no single plain Slurm node"
        stale = self._stale()
        if why or stale:
            if why:
                self._claim(node, "")
            return SlurmUnreadable(self._names.get(node) or candidate, why or stale)
        found = matches(candidate, self._listed, self._dotted)
        name = found[0] if len(found) == 1 else ""
        self._claim(node, name)
        if not name:
            return self._unmatched(candidate, found, slurmd)
        claimants = self._claims[name]
        if len(claimants) > 1:
            why = f"Slurm node {name} is claimed by {', '.join(sorted(claimants))}"
        elif name in self._read.failed:
            why = f"Slurm's entry for it does not parse: {self._read.failed[name]}"
        return SlurmUnreadable(name, why) if why else self._read.items[name]

    def _unmatched(
        self, candidate: str, found: tuple[str, ...], slurmd: str
    ) -> SlurmUnreadable | None:
        """Under the lock: ``candidate`` stands for no single Slurm node. Not a Slurm node
        only when Slurm lists no node of its name, no slurmd pod names it, and every
        entry of the read could be read."""
        if found:
            why = f"{candidate} may be any of Slurm's nodes {', '.join(found)}"
        elif slurmd:
            why = f"slurmd pod {slurmd} names {candidate}, which Slurm does not list"
        elif not self._read.whole:
            why = "Slurm lists node entries that name no node Pitcrew can read"
        else:
            return None
        return SlurmUnreadable(candidate, why)

    def _stale(self) -> str:
        """Why the last read is no view (never read, or too old); empty when it is one."""
        if self._read_at is None:
            return f"Slurm not read yet{': ' if self._failure else ''}{self._failure}"
        if self.clock() - self._read_at <= self.stale_after:
            return ""
        return f"Slurm not read for over {self.stale_after:.0f}s: {self._failure or 'slow'}"

    def _claim(self, node: str, name: str) -> None:
        old = self._names.get(node)
        if old == name:
            return
        if old:
            claimants = self._claims.get(old, set())
            claimants.discard(node)
            if not claimants:
                self._claims.pop(old, None)
                self._wanted.discard(old)
        self._names[node] = name
        if name:
            claimants = self._claims.setdefault(name, set())
            claimants.add(node)
            if len(claimants) == 2:
                logger.warning(
                    "Slurm node %s is claimed by %s: Pitcrew drains and resumes it for neither",
                    name,
                    ", ".join(sorted(claimants)),
                )

    def forget(self, node: str) -> None:
        """Drop Kubernetes node ``node``'s claim: the node was deleted, or it is no
        longer decided as a Slurm node (its policy changed). A claim kept would make
        the node that replaces it (its slurmd pod now elsewhere) a second claimant."""
        with self._lock:
            self._claim(node, "")
            self._names.pop(node, None)

    def node(self, name: str) -> SlurmNodeView | SlurmUnreadable | None:
        """Slurm node ``name`` as last read (None: Slurm does not list it), for a
        drain Pitcrew made and must undo although no policy drains through Slurm."""
        with self._lock:
            stale = self._stale()
            if stale:
                return SlurmUnreadable(name, stale)
            if name in self._read.failed:
                return SlurmUnreadable(
                    name, f"Slurm's entry for it does not parse: {self._read.failed[name]}"
                )
            return self._read.items.get(name)

    # -- the poll -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll()
            except Exception as error:  # the poll goes on whatever one cycle met
                with self._lock:
                    self._failure = str(error)[:300]
                self._say(f"reading Slurm failed: {error}")
                self._wake_if_stale()
            self.poked.wait(self.interval)
            self.poked.clear()

    def poll(self) -> None:
        """Read every Slurm node and publish them; then the jobs of those Pitcrew is
        taking out, for at most ``interval`` (the rest in the next poll); wake the
        Kubernetes nodes whose Slurm node changed, and all of them when Slurm answers
        again after it did not."""
        started = self.clock()
        try:
            read = self.slurm.nodes()
        except Exception as error:
            with self._lock:
                self._failure = str(error)[:300]
            raise
        for problem in read.problems:
            self._say(f"scontrol: {problem}")
        with self._lock:
            before, recovered = self._read, self._read_at is None or bool(self._stale())
            self._read, self._read_at, self._failure = read, self.clock(), ""
            self._woke_stale = False
            self._listed = {*read.items, *read.failed}
            self._dotted = by_short_name(self._listed)
            changed = {
                n
                for n in {*before.items, *read.items, *before.failed, *read.failed}
                if before.items.get(n) != read.items.get(n)
                or before.failed.get(n) != read.failed.get(n)
            }
            self._jobs = {n: j for n, j in self._jobs.items() if n in read.items}
            woken = self._woken(
                changed,
                unmatched=set(before.items) != set(read.items),
                everyone=recovered,
            )
            wanted = sorted(n for n in self._wanted if n in read.items and read.items[n].busy)
        if woken:
            self.wake(woken)
        self._poll_jobs(wanted, until=started + self.interval)

    def _wake_if_stale(self) -> None:
        """Once the last read has aged into no view, wake every node matched so far: their
        decisions say so (and wait) now, not at the next event or resync."""
        with self._lock:
            if self._woke_stale or not self._stale():
                return
            self._woke_stale = True
            woken = list(self._names)
        if woken:
            self.wake(woken)

    def _poll_jobs(self, wanted: list[str], *, until: float) -> None:
        if not wanted:
            return
        start = self._turn % len(wanted)
        changed = set()
        for name in wanted[start:] + wanted[:start]:
            if self.clock() > until:
                break  # slurmctld is slow: the rest are read first next time
            self._turn += 1
            jobs = self._read_jobs(name)
            with self._lock:
                if jobs is None:
                    self._jobs.pop(name, None)
                elif self._jobs.get(name) != jobs:
                    self._jobs[name] = jobs
                    changed.add(name)
        with self._lock:
            woken = self._woken(changed)
            live = {job.id for jobs in self._jobs.values() for job in jobs}
        self._checkpoints = {j: c for j, c in self._checkpoints.items() if j in live}
        if woken:
            self.wake(woken)

    def _woken(
        self, changed: set[str], *, unmatched: bool = False, everyone: bool = False
    ) -> list[str]:
        """Under the lock: the Kubernetes nodes matched to a changed Slurm name; with
        ``unmatched``, those matched to none too (a name Slurm did not list may be
        listed now); with ``everyone``, all (Slurm answers again after it did not)."""
        return [
            k
            for k, name in self._names.items()
            if everyone or name in changed or (unmatched and not name)
        ]

    def _read_jobs(self, name: str) -> tuple[SlurmJobView, ...] | None:
        try:
            read = self.slurm.jobs(name)
        except SlurmError as error:
            self._say(f"squeue for {name}: {error}")
            return None
        for problem in read.problems:
            self._say(f"squeue for {name}: {problem}")
        return tuple(
            SlurmJobView(id=job, checkpoint_at=self._dated(job, _checkpoint(comment)))
            for job, comment in read.items
        )

    def _dated(self, job: str, said: datetime.datetime | None) -> datetime.datetime | None:
        """When this watch saw job ``job``'s checkpoint change, by the operator's clock
        (also its first, after reads that showed none); EPOCH for the one it had when
        first read; None while its comment holds none."""
        known = self._checkpoints.get(job)
        if known is None:
            entry = (said, EPOCH if said is not None else None)
        elif known[0] == said:
            entry = known
        else:
            entry = (said, self.now() if said is not None else None)
        self._checkpoints[job] = entry
        return entry[1]

    def _say(self, message: str) -> None:
        """Log a Slurm problem once until it changes: a down slurmctld every 10 s is noise."""
        if message not in self._said:
            self._said = {message} if len(self._said) > 100 else self._said | {message}
            logger.warning("%s", message)


def _checkpoint(comment: str) -> datetime.datetime | None:
    """The checkpoint time in a job's comment, when it holds a progress report (the
    same JSON as the ``pitcrew.dev/progress`` annotation); None otherwise."""
    if not comment.startswith("{"):
        return None
    progress = decode(comment)
    return progress.checkpoint_time if progress else None
