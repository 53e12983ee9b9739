"""The imperative shell around :func:`pitcrew.core.lifecycle.decide`.

A work queue of node names, filled by watch events (any change to a Node, a
Pod on it, its GPUNode or a policy) and by a periodic resync (time-based
transitions: drain timeouts, checkpoint waits, remediation timeouts). Each
round:

1. decides *sequentially* for every dirty node, updating the in-memory fleet
   after each decision, so two nodes failing in the same instant cannot both
   take the last slot under ``maxUnhealthy`` or ``maxConcurrentDrains``;
2. executes the decisions *in parallel* (one thread per node, bounded), each
   node's actions in order, then writes its GPUNode status by server-side
   apply. A node whose previous decision is still executing waits for the
   next round, so one node never has two decisions in flight.

Order of writes: actions first, status second, so a crash in between repeats
idempotent actions rather than skipping them. The exception is a remediation:
its intent (action, step, attempt, key) is written *before* the remediator
is called, so a new leader never starts the same rung twice; at worst it
waits for that rung's timeout.

Dry run (global flag or per policy) executes nothing against Nodes, Pods,
Jobs or remediators; it records each decision once as an Event and writes
GPUNode and policy status, which is where an SRE reads what Pitcrew would do.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client

from pitcrew.api.gpunode import GPUNodeStatus, Phase
from pitcrew.api.meta import API_VERSION, GROUP, VERSION, Duration
from pitcrew.api.policy import GPUHealthPolicy, RemediationAction
from pitcrew.api.vocabulary import (
    LAST_REMEDIATION,
    OPERATOR_MANAGER,
    SPARE_TAINT,
    UNHEALTHY,
    account_name,
)
from pitcrew.controller import metrics
from pitcrew.controller.accountant import Accountant
from pitcrew.controller.runs import Runs
from pitcrew.controller.settings import OperatorSettings
from pitcrew.controller.store import Store, summarize
from pitcrew.core import actions as a
from pitcrew.core.convert import gpu_capacity, node_view, policy_view
from pitcrew.core.lifecycle import Decision, decide
from pitcrew.core.node_edits import NodeAction
from pitcrew.core.safety import unhealthy_limit
from pitcrew.core.views import FleetView, NodeState, PolicyView
from pitcrew.kube import evictions, gpunodes, jobs, nodes
from pitcrew.kube.client import retrying
from pitcrew.kube.events import Recorder, Ref, gpunode_ref, node_ref
from pitcrew.remediators import RemediationError, RemediationRequest, Remediator
from pitcrew.remediators.clusterapi import ClusterApi
from pitcrew.remediators.redfish import RedfishReboot
from pitcrew.remediators.reset_gpu import ResetGpu
from pitcrew.remediators.webhook import Webhook

logger = logging.getLogger(__name__)
RESYNC_CHUNK = 200
DEFAULT_RUNG_TIMEOUT = Duration("15m")
Clock = Callable[[], datetime.datetime]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Plan:
    node: str
    policy: PolicyView
    decision: Decision
    dry_run: bool
    before: GPUNodeStatus


class Reconciler:
    def __init__(
        self, api: client.ApiClient, settings: OperatorSettings, *, clock: Clock = utc_now
    ) -> None:
        self.api = api
        self.settings = settings
        self.clock = clock
        self.store = Store()
        self.accountant = Accountant(self.store, now=clock())
        self.recorder = Recorder(api)
        self.runs = Runs(api, self.store, settings, self.recorder)
        self.backoff = evictions.Backoff()
        self.pool = ThreadPoolExecutor(
            max_workers=settings.workers, thread_name_prefix="pitcrew-exec"
        )
        self.dirty: set[str] = set()
        self.resync: set[str] = set()
        self.intended: dict[str, GPUNodeStatus] = {}
        self.remediation_errors: dict[str, str] = {}
        self.status_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pitcrew-policy")
        self.remediation_pool = ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="pitcrew-remediate"
        )
        self.in_flight: set[str] = set()
        self.wakeup = asyncio.Event()
        self.dry_run_recorded: set[tuple[str, str, str]] = set()
        self.last_round_at: datetime.datetime = clock()
        self.last_resync_at: datetime.datetime = clock()
        self.warned_no_policy = False
        self.last_gpunode_event: datetime.datetime | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.remediators: dict[RemediationAction, Remediator] = {
            RemediationAction.RESET_GPU: ResetGpu(
                api,
                namespace=settings.namespace,
                image=settings.remediation_image,
                service_account=account_name("remediation", settings.account_prefix),
            ),
            RemediationAction.REBOOT: RedfishReboot(api),
            RemediationAction.REIMAGE: Webhook(),
            RemediationAction.WEBHOOK: Webhook(),
            RemediationAction.CLUSTER_API: ClusterApi(api),
        }

    # -- events ---------------------------------------------------------------------------

    def observe(self, kind: str, obj: dict[str, Any], *, deleted: bool = False) -> None:
        """Record a watch event and mark the nodes it concerns."""
        if kind == "gpunode":
            self.last_gpunode_event = self.clock()
        if kind == "run":
            self.store.put(kind, obj, deleted=deleted)
            self.wakeup.set()
            return
        if kind == "policy":
            before = self.store.policies.get(obj.get("metadata", {}).get("name", ""))
            self.store.put(kind, obj, deleted=deleted)
            generation = obj.get("metadata", {}).get("generation")
            if deleted or before is None or before["metadata"].get("generation") != generation:
                self.mark(self.store.nodes)
            return
        name = self.store.put(kind, obj, deleted=deleted)
        if name:
            self.mark([name])

    def mark(self, names: Iterable[str]) -> None:
        """Queue nodes for the next round. Safe from any thread."""
        names = list(names)
        if self.loop is not None and threading.current_thread() is not threading.main_thread():
            self.loop.call_soon_threadsafe(self._mark, names)
        else:
            self._mark(names)

    def _mark(self, names: list[str]) -> None:
        self.dirty.update(names)
        self.wakeup.set()

    # -- the loop -------------------------------------------------------------------------

    def retry_later(self, node: str, seconds: float) -> None:
        """Re-decide ``node`` after ``seconds`` (from any thread): a drain blocked by a
        PDB is retried when its backoff ends, not at the next resync."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.call_later, seconds, self._mark, [node])

    async def account(self) -> None:
        """Feed GPU-time and job-time metrics from the cache, every few seconds."""
        while True:
            await asyncio.sleep(self.settings.accounting_seconds)
            try:
                self.accountant.tick(self.clock())
            except Exception:
                metrics.RECONCILE_ERRORS.inc()
                logger.exception("accounting failed; retried on the next tick")

    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(TimeoutError):  # a quiet period ends in the resync below
                await asyncio.wait_for(self.wakeup.wait(), timeout=self.settings.resync_seconds)
            if self.clock() - self.last_resync_at > datetime.timedelta(
                seconds=self.settings.resync_seconds
            ):
                self.last_resync_at = self.clock()
                self.resync.update(self.store.nodes)
            self.wakeup.clear()
            self.last_round_at = self.clock()
            await asyncio.sleep(0.05)  # let a burst of events coalesce into one round
            # Nodes with news first; the periodic resync in chunks behind them, so a
            # fault is never queued behind a sweep of the whole fleet.
            batch = self.dirty - self.in_flight
            self.dirty -= batch
            chunk = list(self.resync - self.in_flight - batch)[:RESYNC_CHUNK]
            self.resync.difference_update(chunk)
            batch.update(chunk)
            if self.resync:
                self.wakeup.set()
            if self.runs.active() and not self.settings.dry_run:
                await self._in_thread(self.runs.step, self.clock())
            if batch:
                started = self.clock()
                try:
                    await self.reconcile(batch)
                    logger.debug(
                        "round of %d nodes took %.3fs",
                        len(batch),
                        (self.clock() - started).total_seconds(),
                    )
                except Exception:
                    metrics.RECONCILE_ERRORS.inc()
                    logger.exception("reconcile round failed; retrying on the next round")
                    self.mark(batch)

    def _policy_for(self, name: str) -> tuple[PolicyView | None, tuple[str, ...]]:
        matched = self.store.policies_of(name)
        if len(matched) != 1:
            return None, matched
        return self.store.policy(matched[0]), matched

    def _fleet(self, policy: PolicyView, statuses: dict[str, GPUNodeStatus]) -> FleetView:
        phases: dict[Phase, int] = {}
        spares: list[tuple[datetime.datetime, str]] = []
        total = refused = 0
        member = (policy.name,)
        for name in self.store.nodes:
            if self.store.policies_of(name) != member:
                continue
            intended = statuses.get(name)
            summary = summarize(intended) if intended else self.store.summary(name)
            if summary.phase is Phase.EXCLUDED:
                continue
            total += 1
            phases[summary.phase] = phases.get(summary.phase, 0) + 1
            refused += summary.refused
            if summary.phase is Phase.SPARE:
                spares.append(
                    (summary.since or datetime.datetime.min.replace(tzinfo=datetime.UTC), name)
                )
        return FleetView(
            total=total, phases=phases, spares=tuple(n for _, n in sorted(spares)), refused=refused
        )

    async def reconcile(self, names: Iterable[str]) -> None:
        now = self.clock()
        if not self.store.policies:
            if not self.warned_no_policy:
                logger.info("no GPUHealthPolicy in the cluster: managing nothing")
                self.warned_no_policy = True
            return
        self.warned_no_policy = False
        decided = self.intended
        plans: list[Plan] = []
        fleets: dict[str, FleetView] = {}
        for name in sorted(names):
            node = self.store.nodes.get(name)
            if node is None:
                continue
            policy, matched = self._policy_for(name)
            if policy is None:
                if len(matched) > 1:
                    self._record_once(
                        name,
                        "PolicyConflict",
                        f"node matches several policies ({', '.join(matched)}); "
                        "policies must not overlap: managing it under none",
                    )
                continue
            if name not in self.store.gpunodes:
                await self._in_thread(
                    gpunodes.ensure, self.api, node=name, node_uid=node["metadata"].get("uid", "")
                )
            fleet = fleets.get(policy.name) or self._fleet(policy, decided)
            gpunode = self.store.gpunodes.get(name) or {}
            state = NodeState(
                node=node_view(node, self.store.pods_on(name)), status=self._known(name)
            )
            decision = decide(
                state=state,
                policy=policy,
                fleet=fleet,
                now=now,
                generation=int(gpunode.get("metadata", {}).get("generation", 1)),
            )
            if not decision.actions and decision.status == state.status:
                fleets[policy.name] = fleet
                continue  # the common case at resync: nothing to do, no thread hop
            decided[name] = decision.status
            fleets[policy.name] = self._updated(fleet, state.status, decision, name)
            dry_run = self.settings.dry_run or policy.spec.safety.dry_run
            plans.append(Plan(name, policy, decision, dry_run, state.status))
        for plan in plans:
            self._launch(plan)
        for policy_name in fleets:
            policy_obj = self.store.policies.get(policy_name)
            if policy_obj is not None:
                # Its own single thread: never queued behind node plans, in order.
                self.status_pool.submit(
                    self._write_policy_status_logged,
                    policy_obj,
                    self._fleet(self.store.policy(policy_name), decided),
                    now,
                )

    def _write_policy_status_logged(
        self, policy: dict[str, Any], fleet: FleetView, now: datetime.datetime
    ) -> None:
        try:
            self.write_policy_status(policy, fleet, now)
        except Exception:
            logger.exception("writing the status of policy %s failed", policy["metadata"]["name"])

    def _known(self, name: str) -> GPUNodeStatus:
        """The stored status, with what the shell learnt since (a remediator that
        failed to start) folded in, so the decision sees it."""
        status = self.store.status(name)
        remediation = status.remediation
        if remediation is not None and remediation.reference in self.remediation_errors:
            error = self.remediation_errors.pop(remediation.reference)
            status = status.model_copy(
                update={"remediation": remediation.model_copy(update={"error": error})}
            )
        return status

    def _launch(self, plan: Plan) -> None:
        """Execute ``plan`` without holding up the next round; until it is done the
        node is not decided again and its intended status counts in the fleet."""
        assert self.loop is not None
        self.in_flight.add(plan.node)
        self.intended[plan.node] = plan.decision.status

        def done(_: object) -> None:
            self.in_flight.discard(plan.node)
            self.intended.pop(plan.node, None)
            self.wakeup.set()

        self.loop.run_in_executor(self.pool, self.execute, plan).add_done_callback(done)

    @staticmethod
    def _updated(
        fleet: FleetView, before: GPUNodeStatus, decision: Decision, name: str
    ) -> FleetView:
        phases = dict(fleet.phases)
        phases[before.phase] = phases.get(before.phase, 1) - 1
        phases[decision.phase] = phases.get(decision.phase, 0) + 1
        spares = [s for s in fleet.spares if s != name]
        released = {x.node for x in decision.actions if isinstance(x, a.ReleaseSpare)}
        spares = [s for s in spares if s not in released]
        if decision.phase is Phase.SPARE:
            spares.append(name)
        return FleetView(
            total=fleet.total, phases=phases, spares=tuple(spares), refused=fleet.refused
        )

    async def _in_thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    # -- execution (runs in a worker thread) ----------------------------------------------

    def execute(self, plan: Plan) -> None:
        status = plan.decision.status
        try:
            remediations = [x for x in plan.decision.actions if isinstance(x, a.Remediate)]
            if remediations and not plan.dry_run:
                self._write_status(plan.node, status)  # intent first: see module docstring
            for action in plan.decision.actions:
                status = self._perform(plan, action, status)
            self._write_status(plan.node, status)
        except Exception:
            metrics.RECONCILE_ERRORS.inc()
            logger.exception("executing the decision for %s failed; it is retried", plan.node)
            self.mark([plan.node])
            return
        if not plan.dry_run:
            metrics.record_decision(
                pool=plan.policy.name, before=plan.before, after=status, now=self.clock()
            )

    def _refs(self, node: str) -> tuple[Any, Any]:
        uid = self.store.nodes.get(node, {}).get("metadata", {}).get("uid", "")
        gpu_uid = self.store.gpunodes.get(node, {}).get("metadata", {}).get("uid", "")
        return node_ref(node, uid), gpunode_ref(node, gpu_uid)

    def _event(self, node: str, reason: str, message: str, *, warning: bool = False) -> None:
        for ref in self._refs(node):
            self.recorder.emit(ref, reason=reason, message=message, warning=warning)

    def _record_once(self, node: str, reason: str, message: str) -> None:
        key = (node, reason, message)
        if key not in self.dry_run_recorded:
            self.dry_run_recorded.add(key)
            self._event(node, reason, message, warning=True)

    def _perform(self, plan: Plan, action: a.Action, status: GPUNodeStatus) -> GPUNodeStatus:
        node = plan.node
        if isinstance(action, a.Record):
            self._event(node, action.reason, action.message, warning=action.warning)
            return status
        if plan.dry_run:
            description = f"{type(action).__name__}: {action.message}"
            self._record_once(node, f"DryRun{action.reason}", f"dry run, would do {description}")
            return status
        match action:
            case a.Cordon() | a.Uncordon() | a.SetTaint() | a.RemoveTaint():
                if self._edit_node(node, action):
                    self._event(node, action.reason, action.message)
            case a.ReleaseSpare():
                if self._edit_node(
                    action.node, a.RemoveTaint(SPARE_TAINT, action.reason, action.message)
                ):
                    self._event(action.node, action.reason, action.message)
                    self._event(node, action.reason, f"released spare {action.node}")
            case a.Evict():
                return self._evict(plan, action, status)
            case a.ForceDelete():
                deleted = evictions.force_delete(self.api, action.pods)
                self._event(
                    node, action.reason, f"{action.message}: {', '.join(deleted)}", warning=True
                )
            case a.StartProbe():
                self._start_probe(plan, action)
            case a.Remediate():
                # Slow peers (BMCs, webhooks) must not hold up the next node's cordon:
                # the intent is already written, the call runs on its own pool.
                self.remediation_pool.submit(self._remediate, plan, action, status)
        return status

    def _edit_node(self, node: str, action: NodeAction) -> bool:
        """Apply a node edit and remember the result at once: the next decision for
        this node must not see the Node as it was before its own edit."""
        patched = nodes.apply_action(self.api, node, action)
        if patched is None:
            return False
        self.store.put("node", patched)
        return True

    def _evict(self, plan: Plan, action: a.Evict, status: GPUNodeStatus) -> GPUNodeStatus:
        result = evictions.evict(
            self.api,
            action.pods,
            backoff=self.backoff,
            now=self.clock(),
            parallelism=plan.policy.spec.safety.drain.max_parallel_evictions,
        )
        pool = plan.policy.name
        metrics.EVICTIONS.labels(pool, "evicted").inc(len(result.evicted))
        metrics.EVICTIONS.labels(pool, "blocked").inc(len(result.blocked))
        metrics.EVICTIONS.labels(pool, "failed").inc(len(result.failed))
        if result.evicted:
            self._event(
                plan.node,
                "Evicted",
                f"evicted {len(result.evicted)} pods: {', '.join(sorted(result.evicted))[:900]}",
            )
        for pod, why in sorted(result.blocked.items()):
            self._event(plan.node, "EvictionBlocked", f"{pod}: {why}", warning=True)
        for pod, why in sorted(result.failed.items()):
            self._event(plan.node, "EvictionFailed", f"{pod}: {why}", warning=True)
        if result.blocked or result.skipped:
            self.retry_later(plan.node, self.backoff.earliest(self.clock()))
        drain = status.drain
        if drain is None:
            return status
        blocked = "; ".join(f"{k}: {v}" for k, v in sorted(result.blocked.items()))[:1024]
        return status.model_copy(
            update={
                "drain": drain.model_copy(
                    update={
                        "evicted": drain.evicted + len(result.evicted),
                        "blocked_by": blocked or drain.blocked_by
                        if result.blocked or result.skipped
                        else "",
                    }
                )
            }
        )

    def _start_probe(self, plan: Plan, action: a.StartProbe) -> None:
        spec = plan.policy.spec.validation
        job = jobs.probe_job(
            name=action.name,
            namespace=self.settings.namespace,
            node=plan.node,
            suite=action.suite,
            gpus=gpu_capacity(self.store.nodes.get(plan.node, {})),
            image=self.settings.probe_image,
            deadline_seconds=int(spec.timeout.total_seconds()),
            priority_class=spec.priority_class_name,
            service_account=account_name("probe", self.settings.account_prefix),
            resources=self.settings.probe_resources,
        )
        if jobs.create(self.api, job):
            self._event(
                plan.node,
                action.reason,
                f"{action.message} (Job {self.settings.namespace}/{action.name})",
            )

    def _remediate(self, plan: Plan, action: a.Remediate, status: GPUNodeStatus) -> None:
        """Start one rung (on the remediation pool). A rung that cannot start is
        remembered by key and folded into the next decision, which escalates."""
        remediation = status.remediation
        if remediation is None:  # the decision always records its remediation
            return
        ladder = plan.policy.spec.remediation.ladders.for_class(remediation.fault_class)
        timeout = ladder[action.step].timeout if action.step < len(ladder) else DEFAULT_RUNG_TIMEOUT
        request = RemediationRequest(
            node=plan.node,
            node_object=self.store.nodes.get(plan.node, {}),
            action=action.action.value,
            key=action.key,
            attempt=action.attempt,
            fault_class=remediation.fault_class.value,
            reason=status.reason,
            message=status.message,
            gpus=action.gpus,
            timeout_seconds=int(timeout.total_seconds()),
            policy=plan.policy.spec,
        )
        try:
            description = self.remediators[action.action].start(request)
            self._event(plan.node, action.reason, description)
            nodes.annotate(
                self.api,
                plan.node,
                {
                    LAST_REMEDIATION: json.dumps(
                        {
                            "action": action.action.value,
                            "key": action.key,
                            "at": self.clock().isoformat(),
                        }
                    )
                },
            )
        except RemediationError as error:
            self._event(plan.node, "RemediationFailed", f"{action.action}: {error}", warning=True)
            self.remediation_errors[action.key] = str(error)[:1024]
            self.mark([plan.node])
        except Exception as error:
            logger.exception("remediation %s on %s failed", action.key, plan.node)
            self.remediation_errors[action.key] = f"{type(error).__name__}: {error}"[:1024]
            self.mark([plan.node])

    def _write_status(self, node: str, status: GPUNodeStatus) -> None:
        owned = gpunodes.AGENT_FIELDS | gpunodes.PROBE_FIELDS
        fields = gpunodes.status_fields(status, exclude=owned)
        current = self.store.status(node)
        if gpunodes.status_fields(current, exclude=owned) == fields:
            return
        written = gpunodes.apply_status(
            self.api, node=node, status=fields, manager=OPERATOR_MANAGER
        )
        self.store.put("gpunode", written)

    # -- policy status --------------------------------------------------------------------

    def write_policy_status(
        self, policy: dict[str, Any], fleet: FleetView, now: datetime.datetime
    ) -> None:
        view = policy_view(policy)
        current = policy.get("status") or {}
        limit = unhealthy_limit(view.spec.safety, total=fleet.total)
        unhealthy = fleet.count(*UNHEALTHY)
        was_open = bool((current.get("breaker") or {}).get("open"))
        # Open means the limit is refusing a node that failed, not merely that the
        # fleet sits at the limit: only a refusal starts the storm cooldown.
        is_open = fleet.refused > 0
        breaker: dict[str, Any] = {"open": is_open}
        cooldown = current.get("cooldownUntil")
        if is_open:
            breaker["since"] = (
                (current.get("breaker") or {}).get("since") if was_open else now.isoformat()
            )
            breaker["message"] = (
                f"{unhealthy} of {fleet.total} nodes unhealthy, limit {limit}: "
                f"{fleet.refused} failing nodes kept in service"
            )
        elif was_open:
            cooldown = (now + view.spec.safety.storm_cooldown).isoformat()
        metrics.BREAKER_OPEN.labels(view.name).set(1 if is_open else 0)
        status: dict[str, Any] = {
            "observedGeneration": policy["metadata"].get("generation", 1),
            "nodes": fleet.total,
            "unhealthy": unhealthy,
            "phases": {str(k): v for k, v in sorted(fleet.phases.items()) if v},
            "breaker": breaker,
            "goodput": self.accountant.goodput(view.name, now),
        }
        if cooldown:
            status["cooldownUntil"] = cooldown
        comparable = {k: v for k, v in current.items() if k in status}
        if comparable == status:
            return
        if is_open and not was_open:
            self.recorder.emit(
                _policy_ref(policy),
                reason="CircuitBreakerOpen",
                message=breaker["message"],
                warning=True,
            )
        elif was_open and not is_open:
            self.recorder.emit(
                _policy_ref(policy),
                reason="CircuitBreakerClosed",
                message=f"quarantines resume after {cooldown}",
            )
        body = {
            "apiVersion": API_VERSION,
            "kind": GPUHealthPolicy.KIND,
            "metadata": {"name": policy["metadata"]["name"]},
            "status": status,
        }
        written = retrying(client.CustomObjectsApi(self.api).patch_cluster_custom_object_status)(
            GROUP,
            VERSION,
            GPUHealthPolicy.PLURAL,
            policy["metadata"]["name"],
            body,
            field_manager=OPERATOR_MANAGER,
            force=True,
            _content_type=gpunodes.APPLY,
        )
        self.store.put("policy", cast(dict[str, Any], written))


def _policy_ref(policy: dict[str, Any]) -> Ref:
    meta = policy["metadata"]
    return Ref(GPUHealthPolicy.KIND, meta["name"], API_VERSION, meta.get("uid", ""))
