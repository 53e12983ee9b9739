"""Plain-data views of the cluster objects the decision logic reads.

The pure core (:mod:`pitcrew.core.lifecycle`, :mod:`pitcrew.core.safety`) never sees a
Kubernetes client object: the shell turns Nodes and Pods into these frozen
dataclasses (:mod:`pitcrew.core.convert`), which keeps the decisions unit- and
property-testable and makes explicit which facts they depend on.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from pitcrew.api.gpunode import AgentChecks, GPUNodeStatus, Phase
from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.api.vocabulary import (
    CORDONED_BY,
    CORDONED_BY_VALUE,
    MANAGED_LABEL,
    OUT_BY_PITCREW,
    SLURM_REASON_PREFIX,
    UNHEALTHY,
    VALIDATION_REQUEST,
    VALIDATION_SUITE,
)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    owner_kind: str = ""
    """Kind of the controlling owner: DaemonSet pods are never evicted."""
    mirror: bool = False
    """Static pods (``kubernetes.io/config.mirror``) cannot be evicted."""
    terminating: bool = False
    finished: bool = False
    """Phase Succeeded or Failed: nothing to evict."""
    probe: bool = False
    """A Pitcrew probe or remediation pod: one of its own Jobs', in its namespace
    (:func:`pitcrew.core.convert.own_job`), never a pod that merely carries the label."""
    checkpoint_at: datetime.datetime | None = None
    grace_seconds: int = 30
    job: str = ""
    """The training job it belongs to (``pitcrew.dev/job``); empty for other pods."""
    tolerates: str = ""
    """Of a pod waiting for a node: the value of the ``pitcrew.dev/reserved`` taint it
    tolerates (a spare reserved for its job), if any."""
    job_name: str = ""
    """The Job of Pitcrew's that created it (probe and reset pods); empty for any other
    pod, whatever its ``job-name`` label says."""
    succeeded: bool = False
    disruption: str = ""
    """Reason of its ``DisruptionTarget`` condition (``PreemptionByScheduler``, ...): the
    pod is being removed to make room or by an eviction."""
    slurmd: bool = False
    """The pod that runs the node's slurmd: Slurm's drain moves its jobs; evicting it
    would kill them without Slurm knowing why."""
    pending: bool = False
    """Phase Pending (bound, not started): the eviction API deletes it without asking
    its budget (:func:`pitcrew.core.budgets.eviction_rule`)."""
    ready: bool = True
    """Its ``Ready`` condition is True: a budget counts only ready pods as healthy, and
    lets unready ones go by its ``unhealthyPodEvictionPolicy``."""
    progress_lost: bool = False
    """Its job declares that a fatal fault on its node loses its progress anyway
    (``pitcrew.dev/progress-lost-on-fault``): deleted at once from such a node."""
    restarts_in_place: bool = False
    """Of a training job's pod: a container declares a ``RestartAllContainers`` restart
    rule, so the job's other pods can restart in place when this one is taken away
    (:mod:`pitcrew.core.in_place`)."""
    gpus: int = 0
    """Of a pod waiting for capacity: the GPUs it asks for (a spare lent to it must hold
    them)."""
    node_selector: tuple[tuple[str, str], ...] = ()
    """Of a pod waiting for capacity: its ``nodeSelector`` (a spare lent to it must carry
    these labels)."""
    operator: bool = False
    """The pod this operator runs in: a drain evicts it last, alone, after its status is
    written (:func:`pitcrew.core.lifecycle.draining.draining`)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def evictable(self) -> bool:
        return not (
            self.owner_kind == "DaemonSet"
            or self.mirror
            or self.terminating
            or self.finished
            or self.probe
            or self.slurmd
        )


@dataclass(frozen=True)
class SlurmJobView:
    id: str
    checkpoint_at: datetime.datetime | None = None
    """Its last checkpoint, from the progress report in the job's Slurm comment."""


@dataclass(frozen=True)
class SlurmNodeView:
    """A Kubernetes node's Slurm node, as ``scontrol`` shows it."""

    name: str
    states: tuple[str, ...] = ()
    """Base state, then flags, upper case, as Slurm shows them: ``("MIXED", "DRAIN")``."""
    reason: str = ""
    jobs: tuple[SlurmJobView, ...] | None = None
    """Its running jobs, read only while Pitcrew takes the node out (None: not read)."""

    @property
    def busy(self) -> bool:
        """Jobs run or are ending on it, or may: UNKNOWN is what slurmctld shows for a
        few seconds after it starts, before the node's slurmd registers, whatever runs
        there (``UNKNOWN+DRAIN`` for a drained node whose job runs on)."""
        return not {"ALLOCATED", "MIXED", "COMPLETING", "UNKNOWN"}.isdisjoint(self.states)

    @property
    def drained(self) -> bool:
        """Slurm starts no job on it (a drain, whoever made it, or a failing node)."""
        return not {"DRAIN", "FAIL"}.isdisjoint(self.states)

    @property
    def out(self) -> bool:
        """Drained, failing or down: out of Slurm's service for some reason."""
        return self.drained or "DOWN" in self.states

    @property
    def pitcrews(self) -> bool:
        """Out by Pitcrew's hand (its reason): the only state Pitcrew undoes."""
        return self.out and self.reason.startswith(SLURM_REASON_PREFIX)


@dataclass(frozen=True)
class SlurmUnreadable:
    """A node of a policy that drains through Slurm whose Slurm state cannot be read now:
    the operator has no Slurm client, slurmctld does not answer (or the last answer is
    too old), Slurm's entry for it does not parse, or its Slurm name is unsafe,
    ambiguous or claimed by two nodes. Not "no Slurm here": jobs may run on it. Read as
    busy and not seen drained, so a drain waits and no rung starts (until the drain's
    timeout), and nothing is drained or resumed in Slurm on a guess."""

    name: str
    """Its Slurm name where one is known; empty when none is safe."""
    why: str
    """What could not be read, for a person: the status condition and the Event."""
    jobs: None = None
    """Never read: no evidence of a checkpoint."""
    states: tuple[str, ...] = ()

    @property
    def busy(self) -> bool:
        """Jobs may run on it."""
        return True

    @property
    def drained(self) -> bool:
        """Not seen drained."""
        return False

    @property
    def out(self) -> bool:
        return False

    @property
    def pitcrews(self) -> bool:
        """Nothing is undone on a guess."""
        return False


@dataclass(frozen=True)
class MaintenanceView:
    """The maintenance window that covers a node (the earliest, if several do)."""

    name: str
    """``MaintenanceWindow/<name>`` or ``NodeMaintenance/<name>``."""
    start: datetime.datetime
    end: datetime.datetime | None
    """None: until the request is deleted (a NodeMaintenance)."""
    reason: str = ""

    def over(self, now: datetime.datetime) -> bool:
        return self.end is not None and now >= self.end


@dataclass(frozen=True)
class NodeView:
    name: str
    created: datetime.datetime
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    pods: tuple[PodView, ...] = ()
    gpus: int = 0
    """The node's ``nvidia.com/gpu`` capacity: a probe must have tested this many."""
    boot_id: str = ""
    """``status.nodeInfo.bootID``: a new one is the evidence of a reboot."""
    slurm: SlurmNodeView | SlurmUnreadable | None = None
    """Its Slurm node, when its policy drains through Slurm: as Slurm shows it, or
    :class:`SlurmUnreadable` when that cannot be known now; None only for a node that
    is no Slurm node (its policy does not drain through Slurm, or a fresh, whole read
    of Slurm has no node of its name and no slurmd pod names one)."""
    maintenance: MaintenanceView | None = None
    """The maintenance window that covers it and has not ended, if any."""

    @property
    def opted_out(self) -> bool:
        return self.labels.get(MANAGED_LABEL) == "false"

    @property
    def validation_suite(self) -> str:
        """The suite a ValidationRun asks for, if one holds the node."""
        return self.annotations.get(VALIDATION_SUITE, "") if self.validation_requested else ""

    @property
    def validation_requested(self) -> bool:
        """A ValidationRun holds this node for validation."""
        return bool(self.annotations.get(VALIDATION_REQUEST))

    @property
    def cordoned_by_pitcrew(self) -> bool:
        return self.unschedulable and self.annotations.get(CORDONED_BY) == CORDONED_BY_VALUE

    @property
    def stale_cordon_claim(self) -> bool:
        """Schedulable, yet annotated as cordoned by Pitcrew (someone uncordoned it)."""
        return not self.unschedulable and CORDONED_BY in self.annotations

    @property
    def foreign_cordon(self) -> bool:
        """Cordoned by someone else: Pitcrew must never undo it."""
        return self.unschedulable and not self.cordoned_by_pitcrew

    @property
    def workload(self) -> tuple[PodView, ...]:
        """Pods a drain must move."""
        return tuple(p for p in self.pods if p.evictable)

    @property
    def busy(self) -> bool:
        """Work runs on it: pods a drain must move, or Slurm jobs."""
        return bool(self.workload) or (self.slurm is not None and self.slurm.busy)

    @property
    def work(self) -> str:
        """What runs on it, for a message: a few pods, or Slurm's jobs."""
        if self.workload:
            return ", ".join(p.key for p in self.workload[:5])
        if isinstance(self.slurm, SlurmUnreadable):
            return f"Slurm node {self.slurm.name or self.name} (not readable: {self.slurm.why})"
        return f"Slurm jobs on {self.slurm.name}" if self.slurm and self.slurm.busy else ""

    def has_taint(self, key: str) -> bool:
        return any(t.key == key for t in self.taints)


@dataclass(frozen=True)
class PolicyView:
    name: str
    created: datetime.datetime
    spec: GPUHealthPolicySpec
    breaker_open: bool = False
    breaker_since: datetime.datetime | None = None
    cooldown_until: datetime.datetime | None = None


@dataclass(frozen=True)
class FleetView:
    """What the decision for one node must know about the rest of its policy's fleet."""

    total: int
    phases: dict[Phase, int]
    spares: tuple[str, ...] = ()
    """Names of nodes in phase Spare, oldest first."""
    refused: int = 0
    """Nodes the circuit breaker is keeping in service although they failed."""
    verifying: int = 0
    """Nodes with a periodic verification in flight."""
    leaving_for_maintenance: int = 0
    """Nodes in a phase of :data:`UNHEALTHY` (Suspect, Draining) for a maintenance
    window, not for a fault (reason ``Maintenance``)."""
    reserved: dict[str, int] = field(default_factory=dict)
    """Nodes reserved for each training job (``status.reservation``), by the job as a
    reservation names it: a spare is lent to a job waiting for capacity only while it
    waits for more nodes than it holds."""
    draining_for_maintenance: int = 0
    """Of those, the nodes Draining: they take a window's drain slots, never a fault's."""

    def count(self, *phases: Phase) -> int:
        return sum(self.phases.get(p, 0) for p in phases)

    @property
    def unhealthy(self) -> int:
        """Nodes out of service for a fault: what ``maxUnhealthy`` bounds and the breaker
        counts. Nodes out for a maintenance window are not among them."""
        return self.count(*UNHEALTHY) - self.leaving_for_maintenance

    @property
    def in_maintenance(self) -> int:
        """Nodes out of service for a maintenance window, or on their way out (taken out,
        draining): what the maintenance budget bounds."""
        return self.count(Phase.MAINTENANCE) + self.leaving_for_maintenance

    def spares_wanted(self, count: int) -> int:
        """Spares to hold now: the policy's ``count``, less the nodes out for faults or
        maintenance. A spare released to replace a broken node stays in service; the
        repaired node (or an idle one) becomes the spare again once the pool is whole."""
        return max(0, count - self.count(*OUT_BY_PITCREW))


@dataclass(frozen=True)
class NodeState:
    """Everything decided about one node: the Node, its GPUNode status, and the check
    configuration its GPUNode spec publishes to the agent."""

    node: NodeView
    status: GPUNodeStatus
    checks: AgentChecks | None = None
    rung_started: bool = True
    """Whether this operator process started (or resumed) the rung in
    ``status.remediation``. A leader that took over finds rungs another process
    recorded; one whose start the API never saw (the old leader died, or the
    apiserver went away, between the intent and the call) is resumed if it is
    idempotent for its key."""
    straggler: str = ""
    """Why a job's progress reports name this node its straggler, again and again
    (:mod:`pitcrew.core.stragglers`); empty when none does."""
    hang: str = ""
    """Why a hung training job is blamed on this node (:mod:`pitcrew.core.hangs`);
    empty when none is."""
    waiting: tuple[PodView, ...] = ()
    """On a node reserved for a training job (its ``pitcrew.dev/reserved`` taint): the
    job's pods that wait for a node (Pending, on none). On a spare: the training jobs'
    pods that wait for capacity (the scheduler found no node for them), which a spare
    no displaced job needs may serve."""
