"""The round loop: watch events in, one decision per node, plans out.

A work queue of node names, filled by watch events (any change to a Node, a
Pod on it, its GPUNode or a policy) and by a periodic resync (time-based
transitions: drain timeouts, checkpoint waits, remediation timeouts). Each
round:

1. decides the queued nodes through the pure
   :func:`pitcrew.core.round.decide_round` (the simulator's round too), which
   counts the pool after each decision, so two nodes failing in the same
   instant cannot both take the last slot under ``maxUnhealthy`` or
   ``maxConcurrentDrains``;
2. hands each plan to the :class:`~pitcrew.controller.executor.Executor` on a
   worker pool and moves on without waiting. A node whose plan is still in
   flight is not decided again until it is done, and meanwhile it counts in
   the pool as :func:`pitcrew.core.round.member` says, so the bounds hold even
   when executions overlap rounds; a decision's wake-up before the next resync
   requeues its node for that instant;
3. submits each touched policy's status (fleet, breaker, goodput) to the
   :class:`~pitcrew.controller.policy_status.PolicyStatusWriter`.

No round runs before the loop has listed every watched kind itself
(:meth:`RoundLoop.prime`): kopf delivers its initial lists as ordinary
events, with nothing to say when they are complete, and a node decided before
its GPUNode or its pods are cached would be decided as new (Pending) or as
idle, and the status write would erase its drain, remediation and history.
For the same reason a node whose GPUNode exists but is not cached yet (its
create answered 409), or whose status does not parse, is skipped and said so,
never decided from an empty status.

A replica decides only the nodes of the pools whose Lease it holds
(:mod:`pitcrew.controller.leader`, design 017): the others' nodes stay in its
cache, undecided, and when it takes a pool over (:meth:`RoundLoop.taken_over`)
they are all decided at once. The cluster-wide work (ValidationRuns, nodes no
policy manages any more) is the cluster shard's.

Nodes with news go first; the periodic resync follows in chunks, so a fault
is never queued behind a sweep of the whole fleet. A decision that changes
nothing stays on the event loop (no thread hop): at thousands of nodes that
is the common case of every resync.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import heapq
import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Protocol

from pitcrew.api.gpunode import GPUNodeStatus
from pitcrew.api.vocabulary import PITCREW_TAINTS, TAKEN_OUT, UNHEALTHY
from pitcrew.controller import metrics
from pitcrew.controller.executor import Executor, Plan
from pitcrew.controller.lanes import Pool
from pitcrew.controller.policy_status import PolicyStatusWriter
from pitcrew.controller.ports import Alone, Cluster, Leadership
from pitcrew.controller.settings import OperatorSettings, operator_pod
from pitcrew.controller.slurm import SlurmWatch
from pitcrew.controller.store import Store
from pitcrew.core import actions as a
from pitcrew.core.convert import node_view, object_key, waiting_pod_view
from pitcrew.core.fleet import Tally
from pitcrew.core.lifecycle import Decision
from pitcrew.core.maintenance import covering
from pitcrew.core.rest import fleet_signature, quiet_until
from pitcrew.core.round import Decided, Due, decide_round, member
from pitcrew.core.slurm import slurm_name
from pitcrew.core.views import (
    FleetView,
    NodeState,
    NodeView,
    PodView,
    PolicyView,
    SlurmNodeView,
    SlurmUnreadable,
)

logger = logging.getLogger(__name__)
RESYNC_CHUNK = 200
MAX_IN_FLIGHT = 256
"""Plans handed to the workers and not done, at most (eight per worker thread):
each holds a status of its own (a shallow copy: the agent's checks are shared
with the store's), and thousands queued (an operator's first round) would hold
the memory of all of them. Nodes beyond it stay queued, undecided, until a plan
lands: a burst's cordons go ahead of every follow-up write
(:mod:`pitcrew.controller.lanes`), so a node past the bound waits for the
burst's first status writes, and 150 faults at once (of 128 before) fit."""
ROUND_MAX = 500
"""Nodes with news decided in one round, at most: the loop returns to the event loop
between rounds (watch events, the Lease's renewal thread get their turn), so the
first round of a 10,000-node operator, where every node is new, is twenty short
rounds and not one of many seconds."""
COALESCE_SECONDS = 0.01
WAKE_SLACK = 0.05
"""Seconds past a wake-up at which the node is decided again: most deadlines are
compared strictly, so a decision exactly at one would decide the same."""
CAPACITY_WAITING_READ = 256
"""Training pods waiting for capacity that a spare's decision reads, the oldest first:
enough for every spare of a pool to find a job, bounded for a cluster where thousands
wait."""
WATCHED = ("policy", "node", "gpunode", "pod", "run")
PRIME_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
Clock = Callable[[], datetime.datetime]
NO_CLIENT = (
    "the operator runs without Slurm's client (its --slurm-scontrol flag is not set; "
    "the chart's slurm.enabled sets it)"
)


class Steppable(Protocol):
    """What the loop needs of the ValidationRun shell (:class:`~pitcrew.controller.runs.Runs`)."""

    def active(self) -> bool: ...

    def step(self, now: datetime.datetime) -> None: ...

    def run_deleted(self) -> None: ...


class RoundLoop:
    def __init__(
        self,
        *,
        store: Store,
        cluster: Cluster,
        executor: Executor,
        policy_status: PolicyStatusWriter,
        runs: Steppable,
        pool: Pool,
        settings: OperatorSettings,
        clock: Clock,
        slurm: SlurmWatch | None = None,
        leadership: Leadership | None = None,
    ) -> None:
        self.store = store
        self.leadership = leadership or Alone()
        """The shards this replica leads: it decides only the nodes of its pools."""
        self.cluster = cluster
        self.executor = executor
        self.policy_status = policy_status
        self.runs = runs
        self.pool = pool
        self.settings = settings
        self.clock = clock
        self.slurm = slurm
        self.operator_pod = operator_pod(settings)
        self.dirty: set[str] = set()
        self.resync: set[str] = set()
        self.in_flight: set[str] = set()
        self.intended: dict[str, GPUNodeStatus] = {}
        self._intended_revision = 0
        self._tallies: dict[str, Tally] = {}
        """Each pool's count of its nodes' stored summaries (:meth:`fleet`)."""
        self._pool_of: dict[str, str] = {}
        """The pool each counted node is in."""
        self._fleets: dict[str, tuple[FleetView, int, FleetView]] = {}
        self.resting: dict[str, tuple[datetime.datetime, str, Hashable]] = {}
        """Nodes the resync may skip (:mod:`pitcrew.core.rest`): until when, and the
        policy and fleet signature they were decided under."""
        self.wakeup = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.last_round_at = clock()
        self.last_resync_at = clock()
        self.last_gpunode_event: datetime.datetime | None = None
        self.warned_no_policy = False
        self.primed = False
        self.failed_rounds = 0

    # -- events (on the event loop) -------------------------------------------------------

    def observe(self, kind: str, obj: dict[str, Any], *, deleted: bool = False) -> None:
        """Record a watch event and queue the nodes it concerns."""
        if kind == "gpunode":
            self.last_gpunode_event = self.clock()
        if kind == "pdb":
            # A budget that changed may allow a waiting eviction: the drains that wait
            # for it go on now, not on a timer.
            self.store.put(kind, obj, deleted=deleted)
            self.mark(self.executor.waiting_for(object_key(obj)))
            return
        if kind == "window":
            self.store.put(kind, obj, deleted=deleted)
            self.mark(self.store.nodes)  # rare, and any node may be named
            return
        if kind == "run":
            self.store.put(kind, obj, deleted=deleted)
            if deleted:
                self.runs.run_deleted()
            self.wakeup.set()
            return
        if kind == "policy":
            before = self.store.policies.get(obj.get("metadata", {}).get("name", ""))
            self.store.put(kind, obj, deleted=deleted)
            self.leadership.campaign(self.store.policies)
            generation = obj.get("metadata", {}).get("generation")
            if deleted or before is None or before["metadata"].get("generation") != generation:
                self.mark(self.store.nodes)
            return
        name = self.store.put(kind, obj, deleted=deleted)
        if kind == "pod" and name is None:
            # A pod on no node: news to a spare reserved for its job (it waits, it left),
            # and, waiting for capacity, to the spares that may be lent to its job.
            self.mark(self.store.reserved_for(obj))
            self.mark(self.store.lendable_to(obj))
        if kind == "node" and deleted and name:
            self.resting.pop(name, None)
            self.executor.forget(name)
            if self.slurm is not None:
                self.slurm.forget(name)
        if name:
            self.mark([name])

    def relisted(self, kind: str, keys: set[str]) -> None:
        """A raw watch listed ``kind`` again (:mod:`pitcrew.kube.watches`) and observed
        each object of it: what the store holds that the listing lacks was deleted while
        no watch was open, and is observed as deleted."""
        held = {"node": self.store.nodes, "gpunode": self.store.gpunodes, "pod": self.store.pods}
        for key in sorted(held[kind].keys() - keys):
            self.observe(kind, held[kind][key], deleted=True)

    def taken_over(self, policy: str) -> None:
        """This replica took pool ``policy`` over: its nodes are decided now, not at the
        next resync. Safe from any thread (the election's calls it)."""
        self._on_loop(self._taken_over, policy)

    def _taken_over(self, policy: str) -> None:
        pool = (policy,)
        self._mark([name for name in self.store.nodes if self.store.policies_of(name) == pool])

    def mark(self, names: Iterable[str]) -> None:
        """Queue nodes for the next round. Safe from any thread."""
        self._on_loop(self._mark, list(names))

    def requeue(self, node: str, seconds: float) -> None:
        """Decide ``node`` again after ``seconds`` (0: next round). Safe from any thread:
        a drain blocked by a PDB is retried when its backoff ends, not at the resync."""
        if seconds <= 0:
            self.mark([node])
        elif self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.call_later, seconds, self._mark, [node])

    def _mark(self, names: list[str]) -> None:
        self.dirty.update(names)
        self.wakeup.set()

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        if self.loop is not None and threading.current_thread() is not threading.main_thread():
            self.loop.call_soon_threadsafe(fn, *args)
        else:
            fn(*args)

    # -- the loop -------------------------------------------------------------------------

    def prime(self) -> None:
        """List every watched kind into the store (blocking; a worker thread)."""
        for kind in WATCHED:
            for obj in self.cluster.list_objects(kind):
                self.observe(kind, obj)
        self.primed = True
        logger.info(
            "initial lists complete: %d nodes, %d GPUNodes, %d pods, %d policies",
            len(self.store.nodes),
            len(self.store.gpunodes),
            len(self.store.pods),
            len(self.store.policies),
        )

    async def _prime_until_done(self) -> None:
        attempt = 0
        while not self.primed:
            try:
                await self._in_thread(self.prime)
            except Exception:
                delay = PRIME_BACKOFF[min(attempt, len(PRIME_BACKOFF) - 1)]
                logger.exception("listing the cluster failed; retrying in %.0fs", delay)
                attempt += 1
                await asyncio.sleep(delay)

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self._prime_until_done()
        while True:
            with contextlib.suppress(TimeoutError):  # a quiet period ends in the resync below
                await asyncio.wait_for(
                    self.wakeup.wait(), timeout=self.settings.rounds.resync.total_seconds()
                )
            if self.clock() - self.last_resync_at > self.settings.rounds.resync:
                self.last_resync_at = self.clock()
                self.resync.update(self.due())
            self.wakeup.clear()
            self.last_round_at = self.clock()
            await asyncio.sleep(COALESCE_SECONDS)  # a burst of events becomes one round
            batch = self.next_batch()
            if self.runs.active() and not self.settings.dry_run and self.leadership.leads_cluster():
                await self._in_thread(self.runs.step, self.clock())
            if not batch:
                continue
            try:
                await self.reconcile(batch)
                self.failed_rounds = 0
            except Exception:
                metrics.RECONCILE_ERRORS.inc()
                self.failed_rounds += 1
                delay = min(0.5 * 2 ** (self.failed_rounds - 1), 30.0)
                logger.exception("reconcile round failed; retrying in %.1fs", delay)
                await asyncio.sleep(delay)
                self.mark(batch)

    def due(self) -> list[str]:
        """The nodes the resync must decide: all but those resting (their time has not
        come and their pool's fleet is as they saw it)."""
        now = self.clock()
        signatures: dict[str, Hashable] = {}
        found = []
        for name in self.store.nodes:
            rest = self.resting.get(name)
            if rest is not None and rest[0] > now:
                _, policy, signature = rest
                if policy not in signatures:
                    signatures[policy] = self._signature(policy)
                if signatures[policy] == signature:
                    continue
            found.append(name)
        return found

    def _signature(self, policy: str) -> Hashable:
        """The pool's :func:`fleet_signature` now; None (no resting node's) when the
        policy is gone or does not parse."""
        view = self.store.policy(policy) if policy in self.store.policies else None
        return None if view is None else fleet_signature(self.fleet(policy), view)

    def next_batch(self) -> set[str]:
        """Nodes with news (:data:`ROUND_MAX` at most), then a chunk of the resync;
        none with a plan in flight, and none while :data:`MAX_IN_FLIGHT` plans are."""
        if len(self.in_flight) >= MAX_IN_FLIGHT:
            return set()  # the next plan to land wakes the loop
        batch = set(list(self.dirty - self.in_flight)[:ROUND_MAX])
        self.dirty -= batch
        if self.dirty - self.in_flight:
            self.wakeup.set()
        chunk = list(self.resync - self.in_flight - batch)[:RESYNC_CHUNK]
        self.resync.difference_update(chunk)
        batch.update(chunk)
        if self.resync:
            self.wakeup.set()
        return batch

    async def reconcile(self, names: Iterable[str]) -> None:
        """One round: create missing GPUNodes, decide, launch, write policy status."""
        names = sorted(names)
        for name in names:
            node = self.store.nodes.get(name)
            if node is not None and name not in self.store.gpunodes and self._led(name):
                uid = node["metadata"].get("uid", "")
                created = await self._in_thread(
                    self.cluster.ensure_gpunode, node=name, node_uid=uid
                )
                if created is not None:
                    self.store.put("gpunode", created)
        now = self.clock()
        plans, fleets = self.plan(names, now)
        for plan in plans:
            self.launch(plan)
        for policy_name in fleets:
            if policy_name in self.store.policies:
                self.policy_status.submit(policy_name, self.fleet(policy_name), now)

    def plan(
        self, names: Iterable[str], now: datetime.datetime
    ) -> tuple[list[Plan], dict[str, FleetView]]:
        """Decide the nodes in one :func:`~pitcrew.core.round.decide_round`, the pool
        counted after each decision; the plans that do something, and the pool of every
        policy the round touched."""
        if not self.primed:
            return [], {}  # never decide from a partial picture of the cluster
        if not self.store.policies:
            if not self.warned_no_policy:
                logger.info("no GPUHealthPolicy in the cluster: managing nothing")
                self.warned_no_policy = True
        else:
            self.warned_no_policy = False
        done = decide_round(
            names,
            read=self._due,
            fleet=self.fleet,
            now=now,
            limit=MAX_IN_FLIGHT - len(self.in_flight),
        )
        self.dirty.update(done.deferred)  # decided when a plan in flight lands (it wakes the loop)
        plans: list[Plan] = []
        for decided in done.decided:
            name, policy, decision = decided.node, decided.policy, decided.decision
            self._wake(name, decision, now)
            if not decided.changes and not self.executor.owes_progress(name, now):
                self._unchanged(decided, done.fleets[policy.name], now)
                continue
            metrics.DECISIONS.labels("acted").inc()
            self.intended[name] = decision.status
            self._intended_revision += 1
            if decision.status.phase in UNHEALTHY and decided.before.phase not in UNHEALTHY:
                logger.info(
                    "%s: %s -> %s (%s)",
                    name,
                    decided.before.phase,
                    decision.status.phase,
                    policy.name,
                )
            dry_run = self.settings.dry_run or policy.spec.safety.dry_run
            plans.append(Plan(name, policy, decision, dry_run, decided.before))
        return plans, done.fleets

    def _due(self, name: str) -> Due | None:
        """How ``name`` is decided now, or None when it is not (see :meth:`_decidable`)."""
        policy = self._decidable(name)
        if policy is None:
            return None
        gpunode = self.store.gpunodes.get(name) or {}
        status = self.executor.known(name)
        rung = status.remediation
        state = NodeState(
            node=self._node_view(name, self.store.nodes[name], policy, status),
            status=status,
            checks=self.store.published_checks(name),
            rung_started=rung is None or self.executor.started(name, rung.reference),
            straggler=self.store.stragglers.get(name, ""),
            hang=self.store.hangs.get(name, ""),
            waiting=self._waiting(name),
        )
        return Due(
            state=state,
            policy=policy,
            generation=int(gpunode.get("metadata", {}).get("generation", 1)),
            dry_run=self.settings.dry_run or policy.spec.safety.dry_run,
        )

    def _waiting(self, name: str) -> tuple[PodView, ...]:
        """On a node reserved for a training job, the job's pods that wait for a node; on
        a spare, the training pods that wait for capacity (the oldest
        :data:`CAPACITY_WAITING_READ`)."""
        job = self.store.reserved.get(name)
        if job:
            return tuple(waiting_pod_view(p) for p in self.store.waiting(job))
        if name not in self.store.spares:
            return ()
        pods = heapq.nsmallest(
            CAPACITY_WAITING_READ,
            self.store.capacity_waiting.values(),
            key=lambda p: (p["metadata"].get("creationTimestamp") or "", object_key(p)),
        )
        return tuple(waiting_pod_view(p) for p in pods)

    def _wake(self, name: str, decision: Decision, now: datetime.datetime) -> None:
        """A deadline before the next resync is kept to the second: the node is decided
        again when it passes (a drain or a rung timing out is not up to a resync late)."""
        if decision.wake_at is None:
            return
        seconds = (decision.wake_at - now).total_seconds()
        if seconds < self.settings.rounds.resync.total_seconds():
            self.requeue(name, seconds + WAKE_SLACK)

    def _led(self, name: str) -> bool:
        """Whether ``name`` is in one pool and this replica leads it."""
        policy = self._policy_for(name)
        return policy is not None and self.leadership.leads_pool(policy.name)

    def _decidable(self, name: str) -> PolicyView | None:
        """The policy ``name`` is decided under, or None when it is not decided now
        (gone, a plan in flight, no single policy, a pool another replica leads, no
        readable GPUNode yet), said so where a person must know."""
        node = self.store.nodes.get(name)
        if node is None or name in self.in_flight:
            return None
        self.resting.pop(name, None)
        policy = self._policy_for(name)
        if policy is None:
            managed = len(self.store.policies_of(name)) == 1
            if not managed and self.leadership.leads_cluster():  # in no policy, or several
                self._release_if_marked(name, node)
            return None
        if not self.leadership.leads_pool(policy.name):
            return None
        if name not in self.store.gpunodes:
            return None  # it exists (the create said so) but is not cached yet
        problem = self.store.unreadable(name)
        if problem:
            self.executor.record_once(
                name,
                "StatusUnreadable",
                f"GPUNode {name}: {problem}; the node is left as it is until its "
                "status parses (an operator older than the CRD?)",
            )
            return None
        return policy

    def _unchanged(self, decided: Decided, fleet: FleetView, now: datetime.datetime) -> None:
        """A decision that changes nothing: the node rests until time may change it."""
        metrics.DECISIONS.labels("unchanged").inc()
        until = quiet_until(decided.before, decided.decision, now)
        if until is not None:
            self.resting[decided.node] = (
                until,
                decided.policy.name,
                fleet_signature(fleet, decided.policy),
            )

    def launch(self, plan: Plan) -> None:
        """Execute ``plan`` without holding up the next round; until it is done the
        node is not decided again and its intended status counts in the fleet. Its
        cordon goes on the workers' first lane, ahead of every other plan's follow-up
        writes (:mod:`pitcrew.controller.lanes`); the rest of it after."""
        self.in_flight.add(plan.node)
        self.intended[plan.node] = plan.decision.status
        self._intended_revision += 1

        def done(_: object) -> None:
            self._on_loop(self._landed, plan.node)

        def then(cordoned: Future[Plan | None]) -> None:
            rest = cordoned.result() if cordoned.exception() is None else None
            if rest is None:
                done(None)
            else:
                self.pool.submit(self.executor.execute, rest).add_done_callback(done)

        if a.cordon_first(plan.decision.actions)[0]:
            self.pool.submit_first(self.executor.cordon_first, plan).add_done_callback(then)
        else:
            self.pool.submit(self.executor.execute, plan).add_done_callback(done)

    def _release_if_marked(self, name: str, node: dict[str, Any]) -> None:
        """A node no policy manages (policy deleted, node relabelled, overlap) loses
        Pitcrew's cordon and taints, and Pitcrew's Slurm drain (which its status
        remembers, and Slurm still shows as Pitcrew's); a cordon or a drain someone
        else made stays."""
        view = node_view(node)
        ours = any(view.has_taint(t) for t in PITCREW_TAINTS)
        if self.slurm is not None:
            self.slurm.forget(name)
        slurm = self._drained_before(self.executor.known(name))
        slurm_node = slurm.name if isinstance(slurm, SlurmNodeView) and slurm.pitcrews else ""
        if not (view.cordoned_by_pitcrew or view.stale_cordon_claim or ours or slurm_node):
            return
        self.in_flight.add(name)

        def done(_: object) -> None:
            self._on_loop(self._landed, name)

        self.pool.submit(self.executor.release, name, slurm_node=slurm_node).add_done_callback(done)

    def _landed(self, node: str) -> None:
        self.in_flight.discard(node)
        self.intended.pop(node, None)
        self._intended_revision += 1
        self.wakeup.set()

    def _node_view(
        self, name: str, node: dict[str, Any], policy: PolicyView, status: GPUNodeStatus
    ) -> NodeView:
        """The Node, its pods, the maintenance window over it, and its Slurm node when
        its policy drains through Slurm."""
        pods = self.store.pods_on(name)
        labels = node.get("metadata", {}).get("labels") or {}
        maintenance = covering(name, labels, self.store.maintenance_windows(), self.clock())
        spec = policy.spec.slurm
        slurm: SlurmNodeView | SlurmUnreadable | None = None
        slurmd = ""
        if spec.enabled and self.slurm is None:
            # Without Slurm's client the state is unknown, not absent: the slurmd pod is
            # still known (never evicted) and the drain waits for Slurm to its timeout.
            slurm_node, slurmd = slurm_name(name, pods, spec)
            slurm = SlurmUnreadable(slurm_node, NO_CLIENT)
        elif spec.enabled:
            assert self.slurm is not None
            taking_out = status.phase in TAKEN_OUT
            slurm, slurmd = self.slurm.view(name, pods, spec, taking_out=taking_out)
        else:
            if self.slurm is not None:
                self.slurm.forget(name)
            slurm = self._drained_before(status)
        view = node_view(
            node,
            pods,
            self.store.job_checkpoints,
            slurmd=slurmd,
            namespace=self.settings.namespace,
            seen=self.store.checkpoints_seen,
            operator_pod=self.operator_pod,
        )
        return replace(view, slurm=slurm, maintenance=maintenance)

    def _drained_before(self, status: GPUNodeStatus) -> SlurmNodeView | SlurmUnreadable | None:
        """The Slurm node of a node whose policy no longer drains through Slurm, when the
        status says Pitcrew drained it: the drain is to be undone."""
        remembered = status.slurm
        if remembered is None or remembered.drained_by != "pitcrew":
            return None
        if self.slurm is None:
            return SlurmUnreadable(remembered.node, NO_CLIENT)
        return self.slurm.node(remembered.node)

    def _policy_for(self, name: str) -> PolicyView | None:
        matched = self.store.policies_of(name)
        if len(matched) == 1:
            policy = self.store.policy(matched[0])
            if policy is None and self.leadership.leads_pool(matched[0]):
                # One bad policy must not stop the others: its nodes wait, it says why.
                self.policy_status.unreadable(matched[0], self.store.policy_problem(matched[0]))
            return policy
        if len(matched) > 1:
            self.executor.record_once(
                name,
                "PolicyConflict",
                f"node matches several policies ({', '.join(matched)}); "
                "policies must not overlap: managing it under none",
            )
        return None

    def fleet(self, policy: str) -> FleetView:
        """The pool of ``policy``, with plans in flight counted as intended. Each pool's
        :class:`~pitcrew.core.fleet.Tally` of stored summaries counts again only the
        nodes the store says changed (:meth:`Store.take_fleet_changes`); the plans in
        flight (256 at most) are laid over it when the intended statuses moved."""
        for name in self.store.take_fleet_changes():
            self._recount(name)
        stored = self._tallies.setdefault(policy, Tally()).view()  # the same while unchanged
        cached = self._fleets.get(policy)
        if cached is None or cached[0] is not stored or cached[1] != self._intended_revision:
            view = self._with_intended(self._tallies[policy])
            cached = self._fleets[policy] = (stored, self._intended_revision, view)
        return cached[2]

    def _recount(self, name: str) -> None:
        """Node ``name`` counted as the store has it now, in the pool of its one policy
        (in none when it is gone or matches none or several)."""
        matched = self.store.policies_of(name) if name in self.store.nodes else ()
        policy = matched[0] if len(matched) == 1 else None
        before = self._pool_of.pop(name, None)
        if before is not None and before != policy:
            self._tallies[before].set(name, None)
        if policy is not None:
            self._pool_of[name] = policy
            self._tallies.setdefault(policy, Tally()).set(name, self.store.summary(name))

    def _with_intended(self, tally: Tally) -> FleetView:
        """The tally's fleet with each of its nodes whose plan is in flight counted as
        :func:`~pitcrew.core.round.member` says: changed for the view, then put back."""
        stored = {n: tally.members[n] for n in self.intended if n in tally.members}
        if not stored:
            return tally.view()
        for name, summary in stored.items():
            tally.set(name, member(summary, self.intended[name]))
        view = tally.view()
        for name, summary in stored.items():
            tally.set(name, summary)
        return view

    async def _in_thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.wrap_future(self.pool.submit(fn, *args, **kwargs))
