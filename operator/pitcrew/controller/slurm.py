"""Slurm's nodes as the decisions see them: polled with ``scontrol``, mapped to
Kubernetes nodes, and the jobs of the nodes Pitcrew is taking out.

Slurm has no watch a client may use, so its nodes are read every ``interval``
seconds on a thread of their own (one ``scontrol`` call for the whole cluster);
a Slurm node whose state or reason changed wakes the Kubernetes node it belongs
to, so a drain that Slurm has finished is acted on at once, not at the resync.
Jobs are read only for the Slurm nodes whose Kubernetes node Pitcrew is taking
out (a few at a time, bounded by ``maxConcurrentDrains``): their comments carry
the jobs' progress reports, and so their checkpoints.

Slurm out of reach (slurmctld restarting, the client missing) leaves the last
view in place for one interval and then none: a decision without a Slurm view
drains and resumes nothing in Slurm, and no remediation starts on a node whose
Slurm node has not been seen drained (:mod:`pitcrew.core.lifecycle`).
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
from pitcrew.core.slurm import slurm_name
from pitcrew.core.views import SlurmJobView, SlurmNodeView
from pitcrew.slurm.control import Slurm, SlurmError

logger = logging.getLogger(__name__)


class SlurmWatch:
    def __init__(
        self,
        slurm: Slurm,
        *,
        interval: float,
        wake: Callable[[Iterable[str]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slurm = slurm
        self.interval = interval
        self.wake = wake
        self.clock = clock
        self._lock = threading.Lock()
        self._nodes: dict[str, SlurmNodeView] = {}
        self._jobs: dict[str, tuple[SlurmJobView, ...]] = {}
        self._read_at: float | None = None
        self._names: dict[str, str] = {}
        """Kubernetes node -> its Slurm name, as last decided."""
        self._claims: dict[str, set[str]] = {}
        """Slurm name -> the Kubernetes nodes that claim it."""
        self._wanted: set[str] = set()
        """Slurm names whose jobs to read: nodes Pitcrew is taking out."""
        self._said: set[str] = set()
        self.poked = threading.Event()

    # -- what a decision asks -------------------------------------------------------------

    def view(
        self, node: str, pods: Iterable[Mapping[str, Any]], spec: SlurmSpec, *, taking_out: bool
    ) -> tuple[SlurmNodeView | None, str]:
        """Kubernetes node ``node``'s Slurm node (None: Slurm does not know it, it is not
        safely named, or Slurm's view is stale) and its slurmd pod's key."""
        name, slurmd = slurm_name(node, pods, spec)
        with self._lock:
            self._claim(node, name)
            if taking_out and name:
                self._wanted.add(name)
            elif name:
                self._wanted.discard(name)
            fresh = self._read_at is not None and self.clock() - self._read_at < 2 * self.interval
            found = (
                self._nodes.get(name) if fresh and len(self._claims.get(name, ())) == 1 else None
            )
            if found is None:
                return None, slurmd
            jobs = self._jobs.get(name)
        return (replace(found, jobs=jobs) if jobs is not None else found), slurmd

    def _claim(self, node: str, name: str) -> None:
        old = self._names.get(node)
        if old == name:
            return
        if old:
            self._claims.get(old, set()).discard(node)
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

    # -- the poll -------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll()
            except Exception as error:  # the poll goes on whatever one cycle met
                self._say(f"reading Slurm failed: {error}")
            self.poked.wait(self.interval)
            self.poked.clear()

    def poll(self) -> None:
        """Read every Slurm node, and the jobs of those Pitcrew is taking out; wake the
        Kubernetes nodes whose Slurm node changed."""
        read = self.slurm.nodes()
        for problem in read.problems:
            self._say(f"scontrol: {problem}")
        with self._lock:
            wanted = {n for n in self._wanted if n in read.items and read.items[n].busy}
        jobs = {name: self._read_jobs(name) for name in sorted(wanted)}
        with self._lock:
            before, before_jobs = self._nodes, self._jobs
            self._nodes, self._jobs = read.items, {n: j for n, j in jobs.items() if j is not None}
            self._read_at = self.clock()
            changed = {
                n
                for n in set(before) | set(read.items)
                if before.get(n) != read.items.get(n) or before_jobs.get(n) != self._jobs.get(n)
            }
            nodes = [k for k, name in self._names.items() if name in changed]
        if nodes:
            self.wake(nodes)

    def _read_jobs(self, name: str) -> tuple[SlurmJobView, ...] | None:
        try:
            read = self.slurm.jobs(name)
        except SlurmError as error:
            self._say(f"squeue for {name}: {error}")
            return None
        for problem in read.problems:
            self._say(f"squeue for {name}: {problem}")
        return tuple(SlurmJobView(id=job, checkpoint_at=_checkpoint(c)) for job, c in read.items)

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
