"""Pitcrew in the loop: the node agent, the operator's rounds and its executor.

Every round is :func:`pitcrew.core.round.decide_round`, the operator's own: the
lifecycle with the policy's real ``GPUHealthPolicySpec``, nodes in name order,
each on the pool the decisions before it left, and a plan in flight counted as
the round loop counts it (``core.round.member``: as intended, except that a node
coming back counts as out until its status write lands). Cordons and taints are
:mod:`pitcrew.core.node_edits` plans applied to the node; the breaker is
:func:`pitcrew.core.breaker.next_breaker`. What is simulated is the world's
answer to the actions: evicted pods leave after the grace period, a probe
reports after its run, a reset Job's pod succeeds or a node reboots with a new
boot ID, the agent reports the repair's key, a spare reserved for the job (or lent to
it while its pods wait for capacity: spares read the world's waiting pods) takes the
job's waiting pod at once (the toleration the operator adds to it is taken as done).

A node is decided only when something about it changed (an agent report, an
edit or pod change seen by the watch, a repair's evidence) or at its decision's
wake-up (``Decision.wake_at``: the lifecycle says which deadline it waits for;
this module lists none), and nodes a bound of the pool held (``Decision.held``:
the breaker, the drain, remediation and verification limits) or surplus spares
are decided again when the bounds move, as the operator's periodic resync would.
A node's plan is carried out ``exec_latency`` after its decision, and the node
is not decided again before that (a plan in flight).

Stragglers are judged by :mod:`pitcrew.core.stragglers`, from rank 0's progress
reports: a slow node that holds a rank of the job and is slower than its usual
pace by the policy's ``stragglers.slowerThanMedianPercent`` is named in every report, one
per ``report_interval`` of training, and after ``consecutiveReports`` of them it
is the job's straggler (``NodeState.straggler``); the lifecycle does the rest.

Hangs are judged by :func:`pitcrew.core.hangs.judge`, the operator's own rule, from
the heartbeats the job's pods would carry: every rank's last step at the moment the
job hung, at the job's step time, each pod still reporting but the one on a node
whose own fault hung the job (its process froze with it), silent since. The
rule's own wake-up says when to look again; once it finds the job hung, the node it
blames gets ``NodeState.hang`` (the lifecycle quarantines it) and the job's pods are
restarted, long before the watchdog the stock cluster waits for.
"""

from __future__ import annotations

import datetime
import time
from collections import Counter
from dataclasses import replace
from typing import assert_never

from gpuhealth.report import CheckResult, CheckStatus, FaultClass
from pitcrew.api.gpunode import ChecksStatus, GPUNodeStatus, Phase, Transition
from pitcrew.api.policy import GPUHealthPolicySpec, RemediationAction
from pitcrew.api.vocabulary import (
    IN_SERVICE,
    OUT_OF_SERVICE,
    RESERVED_TAINT,
    SPARE_TAINT,
    UNHEALTHY,
)
from pitcrew.core import actions as a
from pitcrew.core import node_edits
from pitcrew.core.agent_config import agent_checks
from pitcrew.core.breaker import Breaker, next_breaker
from pitcrew.core.breaker import Transition as BreakerTransition
from pitcrew.core.evidence import Finding, worst_finding
from pitcrew.core.fleet import Summary, summarize
from pitcrew.core.hangs import Heartbeat, RankPod, judge
from pitcrew.core.job_ledger import Progress, RankTime
from pitcrew.core.round import Decided, Due, decide_round, member
from pitcrew.core.stragglers import slow_nodes, verdict
from pitcrew.core.views import FleetView, NodeState, PolicyView
from pitcrew.simulate import timing
from pitcrew.simulate.clock import at, seconds
from pitcrew.simulate.job import State
from pitcrew.simulate.mix import Depth, Fault, Shows, Symptom
from pitcrew.simulate.node import Node, Stage
from pitcrew.simulate.settings import Assumptions, Contender
from pitcrew.simulate.world import JOB_NAME, World

EPSILON = 0.001
"""Timers fire just past a deadline: the lifecycle compares most of them strictly."""
_EPOCH = datetime.datetime.min.replace(tzinfo=datetime.UTC)
HEALTHY_CHECK = CheckResult(name="xid", status=CheckStatus.PASS)
SILENT_SYMPTOM = Symptom(
    "gemm", FaultClass.FATAL, "GEMM result differs from the reference (silent data corruption)"
)
SLOW_SYMPTOM = Symptom(
    "gemm", FaultClass.DEGRADED, "GEMM throughput below the node's peers: the GPU runs slow"
)
"""What a probe under load finds on a straggler: its own GEMMs are slow."""
STRAGGLER_NODE = "straggler"
"""The node a straggler's report names, as :meth:`Operator.judges` asks core."""
REPORT_TOLERANCE = 1e-6
"""Seconds of training a verdict may come early by (floating point)."""
REPAIR_DEPTH = {
    RemediationAction.RESET_GPU: Depth.RESET,
    RemediationAction.REBOOT: Depth.REBOOT,
    RemediationAction.REIMAGE: Depth.REIMAGE,
    RemediationAction.CLUSTER_API: Depth.REIMAGE,
    RemediationAction.WEBHOOK: Depth.HARDWARE,
}
"""The deepest fault each rung clears. A webhook hands the node to people, who fix
whatever it has."""


class Operator:
    def __init__(
        self,
        world: World,
        *,
        contender: Contender,
        spec: GPUHealthPolicySpec,
        assumptions: Assumptions,
        created: datetime.datetime,
    ) -> None:
        self.world, self.clock, self.spec = world, world.clock, spec
        self.assumptions = assumptions
        self.policy = PolicyView(name=contender.name, created=created, spec=spec)
        self.detection = contender.detection
        self.interval = spec.checks.interval.total_seconds()
        self.breaker = Breaker()
        self.dirty: set[int] = set()
        self.round_pending = False
        self.resync_pending = False
        self.blocked: set[int] = set()
        """Nodes a bound of the pool held at their last decision (``Decision.held``)."""
        self.landed: dict[int, GPUNodeStatus] = {}
        """The status written before the plan in flight for a node (what the API holds
        until the plan lands)."""
        self.suspects: set[int] = set()
        self.out: set[str] = set()
        self.summaries: dict[int, Summary] = {}
        self.phases: Counter[Phase] = Counter()
        self.refused = self.verifying = self.total = 0
        self.spares: dict[str, datetime.datetime] = {}
        self.reserved: Counter[str] = Counter()
        """Nodes reserved for each job (``status.reservation``), as ``fleet_of`` counts."""
        self.decisions = 0
        self.cpu = 0.0
        self.records: Counter[str] = Counter()
        self.breaker_trips = 0
        self.hangs: Counter[str] = Counter()
        """Hangs caught by the rule, by the evidence each was blamed on."""

    # -- the fleet, kept as fleet_of would compute it ------------------------------------

    def start(self, nodes: list[Node], *, decide_now: list[Node]) -> None:
        """Every node Healthy and reporting (in service before the policy); the nodes
        the job does not use are decided at once (the spare pool forms from them)."""
        now = self.clock.datetime
        report = ChecksStatus(report_time=now, backend="sim", results=[HEALTHY_CHECK])
        status = GPUNodeStatus(
            phase=Phase.HEALTHY,
            phase_since=self.policy.created,
            reason="Adopted",
            policy=self.policy.name,
            checks=report,
            last_heartbeat=now,
        )
        checks = agent_checks(self.policy, nodes[0].view) if nodes else None
        for node in nodes:
            node.status, node.checks = status, checks
            self._count(node, +1)
        for node in decide_now:
            self.mark(node)

    def _count(self, node: Node, sign: int) -> None:
        if sign > 0:
            # A plan in flight counts as the round loop counts it (core.round.member).
            landed = self.landed.get(node.index)
            stored = summarize(node.status if landed is None else landed)
            self.summaries[node.index] = member(stored, None if landed is None else node.status)
        summary = self.summaries[node.index]
        if summary.phase is Phase.EXCLUDED:
            return
        self.total += sign
        self.phases[summary.phase] += sign
        self.refused += sign * summary.refused
        self.verifying += sign * summary.verifying
        if summary.reservation:
            self.reserved[summary.reservation] += sign
        if summary.phase is Phase.SPARE:
            if sign > 0:
                self.spares[node.name] = summary.since or _EPOCH
                self._pre_pull(node)
            else:
                self.spares.pop(node.name, None)
        if summary.phase is Phase.SUSPECT:
            (self.suspects.add if sign > 0 else self.suspects.discard)(node.index)
        if summary.phase in OUT_OF_SERVICE:
            (self.out.add if sign > 0 else self.out.discard)(node.name)

    def _pre_pull(self, node: Node) -> None:
        """A spare pulls the job's images once it is one, where the policy pre-pulls:
        the pull takes the world's ``image_pull``, and a replacement pod that lands
        there sooner waits for what is left of it."""
        if self.spec.spares.pre_pull_images and node.images_at is None:
            node.images_at = self.clock.now + self.world.realism.image_pull

    def snapshot(self) -> FleetView:
        spares = sorted((since, name) for name, since in self.spares.items())
        return FleetView(
            total=self.total,
            phases={p: n for p, n in self.phases.items() if n > 0},
            spares=tuple(name for _, name in spares),
            refused=self.refused,
            verifying=self.verifying,
            reserved={job: n for job, n in self.reserved.items() if n > 0},
        )

    def remove(self, node: Node) -> None:
        """A person deleted the node (taken for repair): it leaves the fleet."""
        self._count(node, -1)
        self.landed.pop(node.index, None)
        self.dirty.discard(node.index)
        self.blocked.discard(node.index)
        node.timer += 1
        node.repair += 1

    def rejoin(self, node: Node) -> None:
        """The node comes back as a new Node and GPUNode: Pending, reporting."""
        old = node.status.phase
        node.status = GPUNodeStatus()
        node.checks = None
        node.repair_key = node.reset_job = node.probe = ""
        node.history.append(
            Transition(
                time=self.clock.datetime, from_phase=old, to_phase=Phase.PENDING, reason="Rejoined"
            )
        )
        del node.history[:-4]
        self.world.moved(node, old, Phase.PENDING)
        self._count(node, +1)
        self.agent_sees(node, None)

    # -- the node agent -------------------------------------------------------------------

    def agent_sees(self, node: Node, fault: Fault | None) -> None:
        """Something the agent would report changed: it writes at its next sweep. Without
        Pitcrew's detection (an attribution run) a fault's findings reach the operator
        only once a person would have noticed the crash, and a precursor never."""
        delay = node.rng.uniform(0.0, self.interval)
        if fault is not None and not self.detection and self.world.people is not None:
            if node.stage is Stage.WARNING:
                return
            delay += self.world.people.notice_delay(fault)
        self.clock.after(delay, self._report, node)

    def _report(self, node: Node) -> None:
        if node.away or not node.view.ready:
            return
        symptom = self._symptom(node)
        results = [HEALTHY_CHECK]
        if symptom is not None:
            results = [
                CheckResult(
                    name=symptom.check,
                    status=CheckStatus.FAIL,
                    gpu=node.fault.gpu if node.fault is not None else None,
                    fault_class=symptom.fault_class,
                    message=symptom.message,
                )
            ]
        now = self.clock.datetime
        report = ChecksStatus(
            report_time=now, backend="sim", results=results, repair=node.repair_key
        )
        self._set_status(
            node, node.status.model_copy(update={"checks": report, "last_heartbeat": now})
        )
        self.mark(node)

    def _symptom(self, node: Node) -> Symptom | None:
        fault = node.fault
        if fault is None or fault.kind.shows is not Shows.GPU:
            return None
        if node.stage is Stage.ACTIVE:
            return fault.kind.crash
        if node.stage is Stage.WARNING:
            return fault.kind.warning
        return None

    # -- the job's progress reports -------------------------------------------------------

    def judges(self, fault: Fault) -> bool:
        """Whether rank 0's reports name this straggler, as the operator judges them
        (:func:`pitcrew.core.stragglers.slow_nodes`): its rank takes ``slowdown`` times
        its usual step time."""
        report = Progress(
            step=0,
            time=_EPOCH,
            step_seconds=1.0,
            slowest=(RankTime(STRAGGLER_NODE, fault.slowdown, usual_seconds=1.0),),
        )
        return bool(slow_nodes(report, {STRAGGLER_NODE: self.spec.stragglers}))

    def straggling(self, node: Node, fault: Fault) -> None:
        """A rank of the job runs on a slow node: each report names it, and once
        ``consecutiveReports`` of them did (a report per ``report_interval`` of training)
        it is the job's straggler. Without Pitcrew's detection (an attribution run) the
        verdict comes when a person would have noticed the slow job."""
        if not self.judges(fault):
            return
        node.exposure += 1
        job = self.world.job
        people = self.world.people
        if not self.detection and people is not None:
            delay = people.notice_delay(fault)
            self.clock.after(delay, self._judge, node, fault, node.exposure, 0.0)
            return
        reports = self.spec.stragglers.consecutive_reports
        needed = job.running_time() + reports * self.assumptions.report_interval
        self._judge(node, fault, node.exposure, needed)

    def _judge(self, node: Node, fault: Fault, exposure: int, needed: float) -> None:
        """The verdict once the job has run until ``needed`` (its running time) with its
        rank on the node all along; waits while the job is down (no reports)."""
        if exposure != node.exposure or node.fault is not fault:
            return
        if not node.job or node.job_leaving:
            return  # the rank left: a later stretch on the node starts a new streak
        left = needed - self.world.job.running_time()
        if left > REPORT_TOLERANCE:
            self.clock.after(left, self._judge, node, fault, exposure, needed)
            return
        node.straggler = verdict(JOB_NAME, fault.slowdown, self.spec.stragglers.consecutive_reports)
        self.mark(node)

    # -- hangs ----------------------------------------------------------------------------

    def job_stalled(self) -> None:
        """The job stopped stepping, its pods running. Without Pitcrew's detection (an
        attribution run) the NCCL watchdog ends it, as on a stock cluster."""
        job = self.world.job
        if self.detection and job.state is State.HUNG:
            self._hang_check(job.epoch, self.clock.now)

    def _hang_check(self, epoch: int, since: float) -> None:
        """Judge the hung job as the operator would, at the rule's own wake-up. The pod on
        a node whose fault hung the job (its process froze with it) stopped reporting at
        the hang; the others go on beating."""
        job = self.world.job
        if epoch != job.epoch or job.state is not State.HUNG:
            return
        nodes = [n for n in job.ranks if n is not None]
        step_seconds = job.step * job.pace
        now, hung = self.clock.datetime, at(since)
        pods = [
            RankPod(
                key=f"{JOB_NAME}-{rank}",
                node=node.name,
                running=True,
                heartbeat=Heartbeat(
                    rank=rank,
                    step=2,
                    time=hung,
                    step_seconds=step_seconds,
                    beat=hung if _froze(node) else now,
                ),
            )
            for rank, node in enumerate(job.ranks)
            if node is not None
        ]
        verdict = judge(
            JOB_NAME,
            pods,
            self.spec.hangs,
            now=now,
            findings={n.name: found.reason for n in nodes if (found := finding(n))},
            stragglers={n.name: n.straggler for n in nodes if n.straggler},
        )
        if verdict.hang is None:
            if verdict.wake_at is not None:
                self.clock.at(seconds(verdict.wake_at) + EPSILON, self._hang_check, epoch, since)
            return
        self.hangs[verdict.hang.blame] += 1
        for node in nodes:
            if node.name in verdict.hang.culprits:
                node.hang = verdict.hang.culprits[node.name]
                self.mark(node)
        job.crash()  # the job's pods deleted: the launcher starts them again

    def checkpointed(self) -> None:
        """The job's pods carry a new checkpoint time: a Suspect node may drain now."""
        for index in self.suspects:
            node = self.world.nodes[index]
            if node.job:
                self.mark(node)

    # -- rounds ---------------------------------------------------------------------------

    def capacity_wanted(self) -> None:
        """A pod of the job waits for capacity: news to the spares (one may be lent)."""
        for name in self.spares:
            self.mark(self.world.by_name[name])

    def mark(self, node: Node) -> None:
        if node.away:
            return
        self.dirty.add(node.index)
        if not self.round_pending:
            self.round_pending = True
            self.clock.after(0.0, self._round)

    def _round(self) -> None:
        self.round_pending = False
        nodes = self.world.nodes
        ready = {nodes[i].name: nodes[i] for i in self.dirty if not nodes[i].in_flight}
        if not ready:
            return
        self.dirty.difference_update(n.index for n in ready.values())
        before = self._bounds()
        started = time.process_time()
        done = decide_round(
            ready,
            read=lambda name: self._due(ready[name]),
            fleet=lambda _: self.snapshot(),
            now=self.clock.datetime,
        )
        self.cpu += time.process_time() - started
        for decided in done.decided:
            self._apply(ready[decided.node], decided)
        self._breaker()
        if self._bounds() != before:
            self._resync_soon()

    def _bounds(self) -> tuple[int, ...]:
        phases = self.phases
        return (
            sum(phases[p] for p in UNHEALTHY),
            phases[Phase.DRAINING],
            phases[Phase.REMEDIATING],
            self.verifying,
            len(self.spares),
        )

    def _due(self, node: Node) -> Due:
        """The node as the operator would read it: its agent heartbeats while it is up,
        and the accountant judges only the job's own nodes in service
        (core/stragglers.py)."""
        now = self.clock.datetime
        status = node.status
        if node.view.ready:
            status = status.model_copy(update={"last_heartbeat": now})
        straggler = node.straggler if node.job and status.phase in IN_SERVICE else ""
        hang = node.hang if status.phase in IN_SERVICE else ""
        view = replace(node.view, pods=self.world.pods(node))
        waiting = self.world.waiting() if status.phase is Phase.SPARE else ()
        state = NodeState(
            node=view,
            status=status,
            checks=node.checks,
            straggler=straggler,
            hang=hang,
            waiting=waiting,
        )
        return Due(state=state, policy=self.policy)

    def _apply(self, node: Node, decided: Decided) -> None:
        """Carry a decision out: its status counts in the pool at once (as intended, while
        its plan is in flight), its actions land ``exec_latency`` later."""
        decision = decided.decision
        self.decisions += 1
        old = node.status.phase
        if decided.changes:
            self.landed[node.index] = decided.before
            node.in_flight = True
            self.clock.after(self.assumptions.exec_latency, self._execute, node, decision.actions)
        self._set_status(node, decision.status)
        if decision.phase is Phase.RETIRED and old is not Phase.RETIRED and self.world.people:
            self.world.people.retired(node)
        (self.blocked.add if decision.held else self.blocked.discard)(node.index)
        for action in decision.actions:
            if isinstance(action, a.Record):
                self.records[action.reason] += 1
        self._arm(node, decision.wake_at)
        rung = decision.status.remediation
        if rung is not None and rung.awaiting_release and node.view.ready:
            self.clock.after(self.assumptions.exec_latency, self._release, node, rung.reference)

    def _set_status(self, node: Node, status: GPUNodeStatus) -> None:
        old = node.status.phase
        self._count(node, -1)
        node.status = status
        self._count(node, +1)
        self.world.moved(node, old, status.phase)

    def _breaker(self) -> None:
        fleet = self.snapshot()
        breaker, change = next_breaker(
            self.breaker, fleet=fleet, safety=self.spec.safety, now=self.clock.datetime
        )
        if breaker == self.breaker:
            return
        self.breaker = breaker
        self.policy = replace(
            self.policy,
            breaker_open=breaker.open,
            breaker_since=breaker.since,
            cooldown_until=breaker.cooldown_until,
        )
        if change is BreakerTransition.OPENED:
            self.breaker_trips += 1
        if change is BreakerTransition.CLOSED and breaker.cooldown_until is not None:
            self.clock.at(seconds(breaker.cooldown_until) + EPSILON, self._resync)

    def _resync_soon(self) -> None:
        if not self.resync_pending:
            self.resync_pending = True
            self.clock.after(self.assumptions.resync, self._resync)

    def _resync(self) -> None:
        """Decide again the nodes a fleet-wide bound holds, and surplus spares."""
        self.resync_pending = False
        wanted = self.snapshot().spares_wanted(self.spec.spares.count)
        again = set(self.blocked)
        if len(self.spares) > wanted:
            again |= {self.world.by_name[name].index for name in self.spares}
        for index in sorted(again):
            self.mark(self.world.nodes[index])

    # -- deadlines ------------------------------------------------------------------------

    def _arm(self, node: Node, wake_at: datetime.datetime | None) -> None:
        """Decide the node again at its decision's wake-up (just past it: the lifecycle
        compares most deadlines strictly), unless something decides it before."""
        node.timer += 1
        if wake_at is not None:
            self.clock.at(seconds(wake_at) + EPSILON, self._timer, node, node.timer)

    def _timer(self, node: Node, generation: int) -> None:
        if generation == node.timer:
            self.mark(node)

    # -- the executor ---------------------------------------------------------------------

    def _execute(self, node: Node, actions: tuple[a.Action, ...]) -> None:
        node.in_flight = False
        if self.landed.pop(node.index, None) is not None and not node.away:
            # The status write landed: counted as written. A node back in service frees
            # its slot only now, so nodes a bound held are decided again now too.
            bounds = self._bounds()
            self._set_status(node, node.status)
            if self._bounds() != bounds:
                self._resync_soon()
        if node.away:
            return
        changed = False
        for action in actions:
            changed |= self._do(node, action)
        self.world.refresh(node)
        if changed or node.index in self.dirty:
            self.mark(node)

    def _do(self, node: Node, action: a.Action) -> bool:  # noqa: PLR0911, PLR0912 - one case per action
        match action:
            case a.Cordon() | a.Uncordon() | a.SetTaint() | a.RemoveTaint():
                return self._edit(node, action)
            case a.Evict():
                self.world.evict(node, force=False)
                return True
            case a.ForceDelete():
                self.world.evict(node, force=True)
                return True
            case a.RestartInPlace():
                self.world.job.restart_in_place()
                return False
            case a.StartProbe(suite=suite, name=name):
                node.probe, node.probe_suite = name, suite
                duration = timing.PROBE.get(suite, timing.PROBE["standard"]).draw(node.rng)
                self.clock.after(duration, self._probe_done, node, name)
                return True
            case a.CancelProbe(name=name):
                if node.probe == name:
                    node.probe = ""
                    return True
                return False
            case a.Remediate():
                self._remediate(node, action)
                return False
            case a.ConfirmRepair(key=key):
                node.repair_key = key
                self.agent_sees(node, None)
                return False
            case a.ReleaseSpare(node=name):
                spare = self.world.by_name.get(name)
                if spare is not None and self._edit(
                    spare,
                    a.RemoveTaint(taint=SPARE_TAINT, reason=action.reason, message=action.message),
                ):
                    self.world.refresh(spare)
                    self.mark(spare)
                return False
            case a.ReserveSpare(node=name, job=job):
                spare = self.world.by_name.get(name)
                reserve = a.SetTaint(
                    taint=RESERVED_TAINT,
                    value=job,
                    reason=action.reason,
                    message=action.message,
                    replaces=SPARE_TAINT,
                )
                if spare is not None and self._edit(spare, reserve):
                    self.world.refresh(spare)  # the job's waiting pod lands there at once
                    self.mark(spare)
                return False
            case a.Tolerate():
                return False  # the simulated job's pods tolerate their reservation already
            case a.PublishChecks(checks=checks):
                node.checks = checks
                return False
            case a.Record() | a.SetSlurmState():
                return False  # an Event; the simulated fleet runs no Slurm
            case _:
                assert_never(action)

    def _edit(self, node: Node, action: node_edits.NodeAction) -> bool:
        edit = node_edits.plan(node.view, action)
        if edit is None:
            return False
        node.view = node_edits.apply(node.view, edit)
        return True

    # -- the world's answers --------------------------------------------------------------

    def _remediate(self, node: Node, action: a.Remediate) -> None:
        node.repair += 1
        kind = action.action
        if kind is RemediationAction.WEBHOOK and self.world.people is not None:
            duration = self.world.people.by_hand(node.fault)
        else:
            duration = timing.REMEDIATOR.get(kind, timing.REBOOT).draw(node.rng)
        if kind is not RemediationAction.RESET_GPU:
            self.world.down(node)
        self.clock.after(duration, self._repaired, node, node.repair, kind, action.key)

    def _repaired(self, node: Node, generation: int, kind: RemediationAction, key: str) -> None:
        """The rung's work is done: the fault is cleared if the rung reaches deep enough;
        if not, it stays, or (``latent_share``) hides from the passive checks. A
        straggler does not hide: no passive check sees it anyway, and it is slow or
        it is not."""
        if generation != node.repair or node.away:
            return
        fault = node.fault
        if fault is not None and fault.depth <= REPAIR_DEPTH.get(kind, Depth.NONE):
            self.world.clear(node)
        if REPAIR_DEPTH.get(kind) is Depth.REIMAGE:
            node.images_at = None  # a reimage empties the image store
        elif (
            fault is not None
            and node.stage is Stage.ACTIVE
            and fault.kind.shows is not Shows.SLOW
            and fault.rng.random() < self.assumptions.latent_share
        ):
            self.world.hide(node, fault)
        if kind is RemediationAction.RESET_GPU:
            node.reset_job = key
            self.mark(node)
        else:
            self.world.up(node)

    def _release(self, node: Node, key: str) -> None:
        """The agent of a node that is up lets go of the GPUs for reset ``key``: its
        status says so, and the operator hears it as a watch event."""
        rung = node.status.remediation
        if node.away or rung is None or rung.reference != key:
            return
        checks = node.status.checks.model_copy(update={"released": key})
        node.status = node.status.model_copy(update={"checks": checks})
        self.mark(node)

    def _probe_done(self, node: Node, name: str) -> None:
        if node.probe != name or node.away:
            return
        node.probe = ""
        if not node.view.ready:
            return  # the probe pod could not run: the validation times out
        found = self._probe_finds(node)
        results = [
            CheckResult(name="gemm", status=CheckStatus.PASS, gpu=g) for g in range(node.gpus)
        ]
        if found is not None and node.fault is not None:
            results[node.fault.gpu] = CheckResult(
                name=found.check,
                status=CheckStatus.FAIL,
                gpu=node.fault.gpu,
                fault_class=found.fault_class,
                message=found.message,
            )
        report = ChecksStatus(
            report_time=self.clock.datetime,
            backend="sim",
            suite=node.probe_suite,
            results=results,
            job=name,
        )
        self._set_status(node, node.status.model_copy(update={"probe": report}))
        self.mark(node)

    def _probe_finds(self, node: Node) -> Symptom | None:
        """A probe under load finds a fault that shows, and most that hide; a straggler
        by its slow GEMMs."""
        fault = node.fault
        if fault is None:
            return None
        if fault.kind.shows is Shows.SLOW:
            return SLOW_SYMPTOM if node.stage is Stage.ACTIVE else None
        crash = fault.kind.crash or SILENT_SYMPTOM
        if node.stage is Stage.ACTIVE:
            return crash if fault.kind.shows in (Shows.GPU, Shows.SILENT) else None
        if node.stage is Stage.WARNING:
            return fault.kind.warning
        if fault.rng.random() < self.assumptions.probe_finds_hidden:
            return crash
        return None


def finding(node: Node) -> Finding | None:
    """The node's worst finding (``core.evidence.worst_finding``), read again only when
    its status is another: a hung job's check reads every node of the job, and a
    status is replaced, never changed in place, far less often than that."""
    read = node.finding
    if read is None or read[0] is not node.status:
        read = node.finding = (node.status, worst_finding(node.status))
    return read[1]


def _froze(node: Node) -> bool:
    """The node's own fault hung the job: its rank's process stopped with it."""
    fault = node.fault
    return fault is not None and fault.hangs and node.stage is Stage.ACTIVE
