"""A simulated node: what the core sees of it, what runs on it, and the truth about it.

A :class:`Node` is a Kubernetes Node as the core sees it
(:class:`pitcrew.core.views.NodeView`: cordon, taints, annotations, boot ID,
readiness), where the job and other work run on it, and its hardware's truth: the
fault it has, if any, and at which :class:`Stage`. Pitcrew's side (the GPUNode
status, the agent's checks, timers) and the accounting ride along, so that the
world, the job, Pitcrew's operator and the people all act on one object.

It sits below every module that acts on nodes (the world, the job, the operator,
the people) and imports none of them, so that they need not import each other for
the type.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum

from pitcrew.api.gpunode import AgentChecks, GPUNodeStatus, Phase, Transition
from pitcrew.core.evidence import Finding
from pitcrew.core.views import NodeView
from pitcrew.simulate.mix import Fault


class Stage(StrEnum):
    NONE = "none"
    WARNING = "warning"
    """A degraded precursor shows; the job still runs."""
    ACTIVE = "active"
    """Crashed: the job cannot run on the node (a straggler: it runs, slowly)."""
    HIDDEN = "hidden"
    """A repair did not clear it, and passive checks do not see it until it shows again."""


@dataclass(eq=False)
class Node:
    index: int
    name: str
    gpus: int
    view: NodeView
    rng: random.Random = field(repr=False)
    fault: Fault | None = None
    stage: Stage = Stage.NONE
    job: bool = False
    job_leaving: bool = False
    """The job's pod was evicted: terminating until the launcher recreates it elsewhere."""
    other: bool = False
    """Other work runs on it."""
    leaving: int = 0
    """Other pods terminating (evicted, or preempted for the job)."""
    reclaimed_for: int | None = None
    """The job's rank this node is being taken back for."""
    probe: str = ""
    probe_suite: str = ""
    reset_job: str = ""
    """The reset Job whose pod last succeeded here (the evidence of a reset)."""
    boots: int = 0
    down_since: float | None = None
    gpu_unhealthy: bool = False
    """The device plugin marked a GPU of it unhealthy (a fatal Xid): no pod asking for
    all its GPUs lands there until a reboot or a repair clears it."""
    images_at: float | None = None
    """When the job's images are (or will be, while a pull runs) in the node's image
    store; None: not there (never pulled, or a reimage or an RMA emptied it). Image
    garbage collection is not modelled, which favours a cluster that does not
    pre-pull."""
    held: bool = False
    """A person cordoned it and holds it for repair."""
    away: bool = False
    """Taken out of the cluster for a repair (RMA)."""
    thinning: float = 1.0
    """Share of its scheduled faults that still happen (a lemon after new parts)."""
    lemon: bool = False
    # Pitcrew's side
    status: GPUNodeStatus = field(default_factory=GPUNodeStatus, repr=False)
    checks: AgentChecks | None = None
    repair_key: str = ""
    timer: int = 0
    repair: int = 0
    in_flight: bool = False
    straggler: str = ""
    """The job's verdict that this node is its straggler (``NodeState.straggler``),
    while its rank runs here."""
    hang: str = ""
    """The hung job's verdict blaming this node (``NodeState.hang``), while its rank runs
    here."""
    finding: tuple[GPUNodeStatus, Finding | None] | None = field(default=None, repr=False)
    """The worst finding of a status, with the status it was read from
    (:func:`pitcrew.simulate.control.finding`)."""
    exposure: int = 0
    """Generation of the job's stretches on this slow node: a verdict counts the reports
    of one stretch."""
    # accounting
    phase: Phase = Phase.HEALTHY
    history: list[Transition] = field(default_factory=list, repr=False)
    """Phase transitions of the baseline (a person's cordon and repair) and of a
    rejoin after RMA; Pitcrew's own are its GPUNode status history."""

    @property
    def boot_id(self) -> str:
        return f"{self.name}-boot-{self.boots}"
