"""A stand-in for Slurm's tools (``scontrol``, ``squeue``) for the unit tests of the
operator's Slurm watch and its shell; the e2e tests run the real daemons."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pitcrew.core.slurm import Read
from pitcrew.core.views import SlurmNodeView
from pitcrew.slurm.control import SlurmError

CHECKPOINTED = (
    '{"step": 900, "time": "2026-12-05T01:00:00Z", "checkpointStep": 800, '
    '"checkpointTime": "2026-12-05T00:58:00Z"}'
)


@dataclass
class FakeSlurm:
    """Stands in for the tools (the e2e tests run the real ones)."""

    nodes_now: dict[str, SlurmNodeView]
    job_reads: list[str] = field(default_factory=list)
    updates: list[tuple[str, str, str]] = field(default_factory=list)
    down: bool = False
    failed: dict[str, str] = field(default_factory=dict)
    """Entries that do not parse, by name."""
    nameless: int = 0
    """Entries that do not parse and carry no name."""
    timeout: float = 30.0
    squeue_seconds: float = 0.0
    """How long each ``squeue`` takes (on the watch's clock)."""
    clock: list[float] = field(default_factory=lambda: [0.0])
    job_comment: str = CHECKPOINTED
    """The comment of job 41, which runs on every node (a progress report)."""
    during_squeue: Callable[[], None] = lambda: None
    """Called halfway through each ``squeue``: what a decision on another thread sees
    while the watch waits for it."""

    def nodes(self) -> Read[dict[str, SlurmNodeView]]:
        if self.down:
            raise SlurmError(
                "slurm_load_node error: Unable to contact slurm controller", transient=True
            )
        problems = [f"{n}: unreadable state" for n in self.failed] + ["no name"] * self.nameless
        read = Read(dict(self.nodes_now), tuple(problems))
        return replace(read, failed=dict(self.failed)) if self.failed else read

    def jobs(self, node: str) -> Read[tuple[tuple[str, str], ...]]:
        self.job_reads.append(node)
        self.clock[0] += self.squeue_seconds / 2
        self.during_squeue()
        self.clock[0] += self.squeue_seconds / 2
        return Read((("41", self.job_comment),))

    def update(self, node: str, state: str, reason: str = "") -> None:
        """What ``scontrol update`` does to the node, as Slurm shows it next."""
        self.updates.append((node, state, reason))
        old = self.nodes_now[node]
        base = [s for s in old.states if s not in ("DRAIN", "DOWN")] or ["IDLE"]
        if state == "RESUME":
            self.nodes_now[node] = SlurmNodeView(node, tuple(base))
        else:
            self.nodes_now[node] = SlurmNodeView(node, (*base, state), reason=reason)
