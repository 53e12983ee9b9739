"""The simulated cluster: nodes, their faults, the job's placement and other work.

The world is what Pitcrew (or, without it, the device plugin and people) acts on.
A node is a Kubernetes Node as the core sees it (:class:`pitcrew.core.views.NodeView`: cordon,
taints, annotations, boot ID, readiness), the pods on it, and the truth about its
hardware: the fault it has, if any, and at which stage (a precursor, crashed, or
hidden after a repair that did not clear it).

Placement follows a full cluster: a node in service that neither the job nor
Pitcrew's spare pool holds runs other, preemptible work. The job, which has the
highest priority, takes a free node at once, and one running other work after
``reclaim_delay`` (priority preemption). A free node is kept for the job while
the job lacks nodes (it is pending, or one of its nodes is cordoned); otherwise
other work takes it. Any taint keeps both off a node: every taint here is one of
Pitcrew's ``NoSchedule`` taints, except that a spare reserved for the job
(``pitcrew.dev/reserved``) takes the job's waiting pod at once, as the toleration
the operator adds to it lets it.

A straggler (a ``slow`` fault) is the one fault that neither stops the node nor
crashes the job: it sets the job's pace while a rank runs there (the pace is
recomputed whenever the fault comes or goes and whenever a rank is placed on or
leaves a slow node), and only the job's running on it shows it, to Pitcrew
(rank 0's reports) or to people (a slow job).
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Set
from dataclasses import replace
from typing import Protocol

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import DEFAULT_NAMESPACE, OUT_OF_SERVICE, RESERVED_TAINT
from pitcrew.core.job_discovery import taint_value
from pitcrew.core.views import NodeView, PodView
from pitcrew.simulate.clock import Clock, at
from pitcrew.simulate.job import Job
from pitcrew.simulate.mix import Fault, Shows
from pitcrew.simulate.node import Node, Stage
from pitcrew.simulate.settings import Assumptions, Settings
from pitcrew.simulate.timing import MAINTENANCE, spread

SDC_SPREAD = 4.0
"""Late silent corruption's 90th percentile is four times its median (a numerics check
may run daily, a loss spike shows within hours)."""

JOB_NAME = "llm"
TRAINING_NAMESPACE = "train"
JOB_RESERVATION = taint_value(TRAINING_NAMESPACE, JOB_NAME)
"""The job as a spare reserved for it names it."""
OTHER_POD = PodView(namespace="batch", name="other-work", owner_kind="Job")
"""The preemptible work that fills nodes the job and the spare pool do not hold."""
SYSTEM_NAMESPACE = DEFAULT_NAMESPACE


class OperatorPort(Protocol):
    """Pitcrew's operator (:class:`pitcrew.simulate.control.Operator`) as the world and
    the people reach it through :attr:`World.operator`: declared here, so that the world
    does not import the operator that imports it."""

    @property
    def out(self) -> Set[str]:
        """Nodes Pitcrew has taken out of service."""

    def checkpointed(self) -> None:
        """The job's pods carry a new checkpoint time."""

    def mark(self, node: Node) -> None:
        """Something about the node changed: decide it again."""

    def agent_sees(self, node: Node, fault: Fault | None) -> None:
        """Something the node agent would report changed."""

    def straggling(self, node: Node, fault: Fault) -> None:
        """A rank of the job runs on a slow node."""

    def capacity_wanted(self) -> None:
        """A pod of the job waits for capacity (the scheduler found no node for it)."""

    def judges(self, fault: Fault) -> bool:
        """Whether the job's reports name this straggler."""

    def remove(self, node: Node) -> None:
        """A person deleted the node (taken for repair)."""

    def rejoin(self, node: Node) -> None:
        """The node comes back as a new Node."""

    def job_stalled(self) -> None:
        """The job's progress stopped while its pods run (:attr:`Job.hung_since`): a hang,
        which ends at the NCCL watchdog unless the operator restarts the job first
        (:meth:`Job.crash`)."""


class PeoplePort(Protocol):
    """The people (:class:`pitcrew.simulate.people.People`) as the world and Pitcrew's
    operator reach them through :attr:`World.people`."""

    def struck(self, node: Node, fault: Fault) -> None:
        """A fault crashed what ran on the node, or the job began to run on a slow one."""

    def notice_delay(self, fault: Fault) -> float:
        """How long until someone notices the fault's effect on the job."""

    def by_hand(self, fault: Fault | None) -> float:
        """A ticket, then the repair that fixes the fault."""

    def retired(self, node: Node) -> None:
        """Pitcrew retired the node: someone takes it for repair."""


class World:
    def __init__(
        self,
        *,
        clock: Clock,
        settings: Settings,
        assumptions: Assumptions,
        pool: int,
        job_nodes: int,
        created: datetime.datetime,
        lemons: frozenset[int],
        device_plugin: bool,
    ) -> None:
        self.clock, self.settings, self.assumptions = clock, settings, assumptions
        self.device_plugin = device_plugin
        """The device plugin's health check runs (:attr:`Contender.device_plugin`)."""
        gpus = settings.gpus_per_node
        self.nodes: list[Node] = []
        for i in range(pool):
            name = f"gpu-{i:05d}"
            view = NodeView(name=name, created=created, gpus=gpus, boot_id=f"{name}-boot-0")
            node = Node(i, name, gpus, view, random.Random(f"{settings.seed}:world:{i}"))  # noqa: S311
            node.lemon = i in lemons
            self.nodes.append(node)
        self.by_name = {n.name: n for n in self.nodes}
        self.job = Job(
            clock=clock,
            settings=settings,
            assumptions=assumptions,
            size=job_nodes,
            gpus=gpus,
            hosts=self,
        )
        self.operator: OperatorPort | None = None
        self.people: PeoplePort | None = None
        self.free: set[int] = set()
        self.taken: set[int] = set()
        """Usable nodes running other work."""
        self.blocking: set[int] = set()
        self.reclaiming: dict[int, int] = {}
        """Rank -> the node taken back from other work for it."""
        self.reserved: set[int] = set()
        """Spares reserved for the job, free: its waiting pods land there at once."""
        self.lacking: set[int] = set()
        """Nodes of the job that can no longer take its pods (cordoned, tainted, down)."""
        self.phase_gpus: dict[Phase, int] = {Phase.HEALTHY: gpus * pool}
        self.changed: set[int] = set()
        self.held_names: set[str] = set()
        self.masked = 0
        self.struck = 0
        """Faults that struck a node, stragglers included."""
        self.stragglers = 0
        """Of those, stragglers."""
        self.slow: set[int] = set()
        """Nodes with an active straggler."""
        self.realism = settings.realism
        self.contention = random.Random(f"{settings.seed}:contention")  # noqa: S311
        self.borrowed: dict[int, bool] = {}
        """Reserved spares seen, and whether other work had borrowed each (its reclaim
        still under way); forgotten when the reservation ends."""
        self.idle_masked = 0
        """Faults dropped because they struck a node that ran nothing."""

    # -- what the core sees ---------------------------------------------------------------

    def pods(self, node: Node) -> tuple[PodView, ...]:
        pods: list[PodView] = []
        rank = self.job.rank_of.get(node.index)
        if node.job and rank is not None:
            pods.append(
                PodView(
                    namespace=TRAINING_NAMESPACE,
                    name=f"trainer-{rank}",
                    owner_kind="Job",
                    terminating=node.job_leaving,
                    checkpoint_at=at(self.job.checkpoint_at),
                    job=JOB_NAME,
                    progress_lost=self.settings.progress_lost_on_fault,
                    restarts_in_place=self.settings.in_place_restart,
                )
            )
        if node.other:
            pods.append(OTHER_POD)
        pods.extend(
            replace(OTHER_POD, name=f"other-work-{k}", terminating=True)
            for k in range(node.leaving)
        )
        if node.probe:
            pods.append(
                PodView(SYSTEM_NAMESPACE, f"{node.probe}-pod", probe=True, job_name=node.probe)
            )
        if node.reset_job:
            pods.append(
                PodView(
                    SYSTEM_NAMESPACE,
                    f"{node.reset_job}-pod",
                    probe=True,
                    finished=True,
                    succeeded=True,
                    job_name=node.reset_job,
                )
            )
        return tuple(pods)

    def waiting(self) -> tuple[PodView, ...]:
        """The job's pods that wait for capacity: created, and no node for them, not even
        one being taken back from other work."""
        job = self.job
        if not job.down or job.relaunching:
            return ()
        return tuple(
            PodView(
                namespace=TRAINING_NAMESPACE,
                name=f"trainer-{rank}",
                owner_kind="Job",
                job=JOB_NAME,
                pending=True,
                gpus=job.gpus,
            )
            for rank in job.pending()
            if rank not in self.reclaiming
        )

    # -- placement ------------------------------------------------------------------------

    def usable(self, node: Node, *, job: bool = False) -> bool:
        """A pod can land on it (``job``: the job's, which tolerates its reservation)."""
        view = node.view
        return (
            not node.away
            and view.ready
            and not view.unschedulable
            and not self._tainted(view, job=job)
            and not node.gpu_unhealthy
        )

    @staticmethod
    def _tainted(view: NodeView, *, job: bool) -> bool:
        return any(
            not (job and t.key == RESERVED_TAINT and t.value == JOB_RESERVATION)
            for t in view.taints
        )

    def keeps(self, node: Node) -> bool:
        view = node.view
        if node.away or view.unschedulable or self._tainted(view, job=True) or node.job_leaving:
            return False
        if node.gpu_unhealthy:
            return False  # the job's restart recreates its pod, which cannot land here
        if view.ready:
            return True
        since = node.down_since if node.down_since is not None else self.clock.now
        return self.clock.now - since < self.assumptions.not_ready_eviction

    def doubtful(self, job: Job) -> list[Node]:
        """The job's nodes in :attr:`lacking`: :meth:`refresh`, which follows every change
        to a node, puts every node of the job that cannot take its pod there (and an
        eviction its node), so the launcher's restart looks at those, not at every
        rank (tests/unit/simulate/test_indexes.py holds it to a scan of every rank)."""
        ranks = job.rank_of
        return sorted(
            (self.nodes[i] for i in self.lacking if i in ranks), key=lambda n: ranks[n.index]
        )

    def blocked(self, ranks: dict[int, int]) -> bool:
        return any(i in ranks for i in self.blocking)

    def release(self, node: Node) -> None:
        node.job = node.job_leaving = False
        node.straggler = node.hang = ""
        self.lacking.discard(node.index)
        if node.index in self.slow:
            self.pace()
        self.refresh(node)
        self.mark(node)

    def out_of_service(self) -> frozenset[str]:
        if self.operator is not None:
            return frozenset(self.operator.out)
        return frozenset(self.held_names)

    def checkpointed(self) -> None:
        if self.operator is not None:
            self.operator.checkpointed()

    def stalled(self) -> None:
        if self.operator is not None:
            self.operator.job_stalled()

    def fill(self, job: Job) -> None:
        """Place the job's ranks without a node: a free node at once, one running other
        work after the reclaim delay, else wait."""
        if not job.down:
            return
        short = 0
        for rank in job.pending():
            if self.reserved:
                # A reserved spare: at once, even if a node is being taken back for it.
                self.reclaiming.pop(rank, None)
                node = self.nodes[min(self.reserved)]
                self.reserved.discard(node.index)
                self._place(job, rank, node)
                continue
            if rank in self.reclaiming:
                short += 1
                continue
            if self.free:
                node = self.nodes[min(self.free)]
                self.free.discard(node.index)
                self._place(job, rank, node)
            elif self.taken:
                node = self.nodes[min(self.taken)]
                self.taken.discard(node.index)
                node.other, node.leaving, node.reclaimed_for = False, node.leaving + 1, rank
                self.reclaiming[rank] = node.index
                self.clock.after(self.settings.reclaim_delay, self._reclaimed, node)
                short += 1
            else:
                short += 1
        job.set_short(short)
        if short > len(self.reclaiming) and self.operator is not None:
            self.operator.capacity_wanted()

    def refresh(self, node: Node) -> None:
        """Recompute what the node can take after any change to it."""
        i = node.index
        self.free.discard(i)
        self.taken.discard(i)
        self.reserved.discard(i)
        usable = self.usable(node, job=node.job)
        if node.job:
            if usable:
                self.lacking.discard(i)
            else:
                self.lacking.add(i)
                if self.job.down and not self.keeps(node):
                    self.job.relaunch()
            return
        if self._reserved_spare(node):
            return
        if not usable or node.reclaimed_for is not None:
            return
        if node.other:
            self.taken.add(i)
            return
        if node.probe and self.operator is not None and self._verifying(node):
            return
        job = self.job
        if job.down and len(job.unplaced) > len(self.reclaiming):
            self.free.add(i)
            self.fill(job)
            job.try_start()
        elif len(job.unplaced) + len(self.lacking) > len(self.free):
            self.free.add(i)  # kept for the job, which lacks nodes
        else:
            node.other = True
            self.taken.add(i)

    def _reserved_spare(self, node: Node) -> bool:
        """A spare reserved for the job, free: the job's waiting pod lands there at once
        (unless other work had borrowed it). False: not a reserved spare that is usable."""
        if not node.view.has_taint(RESERVED_TAINT):
            self.borrowed.pop(node.index, None)
            return False
        if not self.usable(node, job=True) or self._borrowed(node):
            return False
        self.reserved.add(node.index)
        if self.job.down:
            self.fill(self.job)
            self.job.try_start()
        return True

    def _borrowed(self, node: Node) -> bool:
        """Whether other work had borrowed this reserved spare and still holds it: the
        first time the reservation is seen, a share of spares (``spare_contention``)
        were borrowed, and the job's pod lands only after the reclaim."""
        share = self.realism.spare_contention
        if share <= 0:
            return False
        i = node.index
        if i not in self.borrowed:
            self.borrowed[i] = self.contention.random() < share
            if self.borrowed[i]:
                self.clock.after(self.settings.reclaim_delay, self._given_back, node)
        return self.borrowed[i]

    def _given_back(self, node: Node) -> None:
        if self.borrowed.get(node.index):
            self.borrowed[node.index] = False
            self.refresh(node)

    def _verifying(self, node: Node) -> bool:
        verification = node.status.verification
        return verification is not None and verification.job == node.probe

    def _place(self, job: Job, rank: int, node: Node) -> None:
        job.assign(rank, node)
        node.job, node.job_leaving = True, False
        if node.probe and self._verifying(node):
            node.probe = ""  # the job preempts a verification probe
        if node.index in self.slow:
            self.pace()
            self._exposed(node)
        self.mark(node)

    def _reclaimed(self, node: Node) -> None:
        node.leaving -= 1
        rank, node.reclaimed_for = node.reclaimed_for, None
        if rank is not None and self.reclaiming.get(rank) == node.index:
            self.reclaiming.pop(rank)
        job = self.job
        if rank is not None and job.down and job.ranks[rank] is None and self.usable(node):
            self._place(job, rank, node)
        else:
            self.refresh(node)
        self.fill(job)
        job.try_start()
        self.mark(node)

    def evict(self, node: Node, *, force: bool) -> None:
        """Pods leave the node (a drain): the job loses a rank, other work goes."""
        if node.job and not node.job_leaving:
            node.job_leaving = True
            self.lacking.add(node.index)
            if force:
                self._free_rank(node)
            self.job.crash()
            if force and self.job.down and not self.job.relaunching:
                self.fill(self.job)  # gone at once: its replacement is placed now
                self.job.try_start()
        if node.other:
            node.other = False
            node.leaving += 1
            self.clock.after(self.assumptions.pod_termination, self._left, node)
        if node.probe and self._verifying(node):
            node.probe = ""

    def _free_rank(self, node: Node) -> None:
        self.job.vacate(node)
        self.release(node)

    def _left(self, node: Node) -> None:
        node.leaving = max(0, node.leaving - 1)
        self.refresh(node)
        self.mark(node)

    def mark(self, node: Node) -> None:
        if self.operator is not None:
            self.operator.mark(node)

    # -- faults ---------------------------------------------------------------------------

    def onset(self, fault: Fault) -> None:
        job = self.job
        if fault.node is None:
            if fault.planned:
                job.planned_stop()
            elif fault.kind.shows is Shows.HANG or fault.hangs:
                job.hang()
            else:
                job.crash()
            return
        node = self.nodes[fault.node]
        thinned = node.thinning < 1.0 and fault.rng.random() >= node.thinning
        if node.fault is not None or node.away or thinned:
            self.masked += 1
            return
        if fault.idle >= self.realism.idle_fault_share and not self._runs_work(node):
            self.idle_masked += 1
            return
        self.struck += 1
        node.fault = fault
        if fault.kind.shows is Shows.SLOW:
            self._slows(node, fault)
            return
        if fault.warned:
            node.stage = Stage.WARNING
            if self.operator is not None:
                self.operator.agent_sees(node, fault)
            self.clock.at(fault.crash, self.crash, node, fault)
        else:
            self.crash(node, fault)

    @staticmethod
    def _runs_work(node: Node) -> bool:
        """The job, other work or a probe runs on it: the fault rates are per hour of
        work (Llama 3's are per hour of a node running the job)."""
        return node.job or node.other or bool(node.probe) or node.reclaimed_for is not None

    def crash(self, node: Node, fault: Fault) -> None:
        """The fault takes the node's GPUs (or the host) down: the job, if it is there,
        crashes, and cannot run there until the node is repaired or left."""
        if node.fault is not fault or node.stage is Stage.ACTIVE:
            return
        node.stage = Stage.ACTIVE
        shows = fault.kind.shows
        if shows is Shows.SILENT and self.realism.sdc_detection > 0:
            late = spread(self.realism.sdc_detection, SDC_SPREAD).at(fault.late_z)
            self.clock.after(late, self._corruption_found, node, fault, self.clock.now, node.job)
            return
        self.blocking.add(node.index)
        node.gpu_unhealthy = self.device_plugin and fault.kind.device_plugin_sees
        if node.gpu_unhealthy:
            self.refresh(node)  # free or running other work: no whole-node pod lands now
        if shows in (Shows.HOST, Shows.MAINTENANCE):
            self.down(node)
        if node.job and fault.hangs and self.job.training:
            self.job.hang()  # its pods run on; the agent may still see the fault
        elif node.job:
            self.job.crash()
        if self.operator is not None and shows is Shows.GPU:
            self.operator.agent_sees(node, fault)
        if shows is Shows.MAINTENANCE:
            self.clock.after(MAINTENANCE.draw(fault.rng), self._maintained, node, fault)
        elif self.people is not None:
            self.people.struck(node, fault)

    def _corruption_found(self, node: Node, fault: Fault, began: float, on_job: bool) -> None:
        """Silent corruption shows at last (a loss spike, a numerics check): the job, if
        it ran on the node when the corruption began, restarts from its last checkpoint
        from before then; the node can no longer take it, and a person finds it."""
        if node.fault is not fault:
            return
        self.blocking.add(node.index)
        if on_job:
            self.job.roll_back(began)
            self.job.crash()
        if self.people is not None:
            self.people.struck(node, fault)

    def _slows(self, node: Node, fault: Fault) -> None:
        """A straggler: the node stays up and passes its checks, and the job, if it runs
        there, goes at the node's pace. Nobody is told: the job running on it shows it."""
        self.stragglers += 1
        node.stage = Stage.ACTIVE
        self.slow.add(node.index)
        if node.job:
            self.pace()
            self._exposed(node)

    def _exposed(self, node: Node) -> None:
        """A rank of the job runs on a slow node: its reports (Pitcrew) and its owners
        (people) can see it from now on."""
        fault = node.fault
        assert fault is not None
        if self.operator is not None:
            self.operator.straggling(node, fault)
        if self.people is not None:
            self.people.struck(node, fault)

    def pace(self) -> None:
        """The job steps at its slowest rank's pace."""
        job = self.job
        slowest = 1.0
        for index in self.slow:
            fault = self.nodes[index].fault
            if index in job.rank_of and fault is not None:
                slowest = max(slowest, fault.slowdown)
        job.set_pace(slowest)

    def _maintained(self, node: Node, fault: Fault) -> None:
        if node.fault is fault:
            self.clear(node)
            self.up(node)

    def clear(self, node: Node) -> None:
        node.fault, node.stage = None, Stage.NONE
        node.gpu_unhealthy = False
        self.blocking.discard(node.index)
        if node.index in self.slow:
            self.slow.discard(node.index)
            node.straggler = ""
            self.pace()
        self.job.try_start()

    def hide(self, node: Node, fault: Fault) -> None:
        node.stage = Stage.HIDDEN
        node.gpu_unhealthy = False  # no Xid until it relapses
        self.blocking.discard(node.index)
        relapse = fault.rng.expovariate(1.0 / self.assumptions.relapse_mean)
        self.clock.after(relapse, self._relapse, node, fault)
        self.job.try_start()

    def _relapse(self, node: Node, fault: Fault) -> None:
        if node.fault is fault and node.stage is Stage.HIDDEN:
            self.crash(node, fault)

    def down(self, node: Node) -> None:
        """The node stops answering (a host fault, a reboot, a repair)."""
        if not node.view.ready:
            return
        node.view = replace(node.view, ready=False)
        node.down_since = self.clock.now
        self.refresh(node)
        if node.job:
            self.clock.after(
                self.assumptions.not_ready_eviction, self._unreachable, node, node.down_since
            )
        self.mark(node)

    def _unreachable(self, node: Node, since: float) -> None:
        if node.down_since == since and node.job:
            self.refresh(node)  # its pod is deleted: the job recreates it elsewhere

    def up(self, node: Node) -> None:
        """The node boots (a new boot ID) and is Ready; its agent starts and reports."""
        node.boots += 1
        node.view = replace(node.view, ready=True, boot_id=node.boot_id)
        node.down_since = None
        self.refresh(node)
        if self.operator is not None:
            self.operator.agent_sees(node, None)
        self.mark(node)

    # -- accounting -----------------------------------------------------------------------

    def moved(self, node: Node, old: Phase, new: Phase) -> None:
        """Count the node's GPUs in its new phase (the fleet ledger ticks rarely)."""
        if old is new:
            return
        node.phase = new
        self.phase_gpus[old] = self.phase_gpus.get(old, 0) - node.gpus
        self.phase_gpus[new] = self.phase_gpus.get(new, 0) + node.gpus
        self.changed.add(node.index)
        if new in OUT_OF_SERVICE and self.operator is None:
            self.held_names.add(node.name)
        elif self.operator is None:
            self.held_names.discard(node.name)
