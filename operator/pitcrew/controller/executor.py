"""Carry out one node's plan: actions become API calls, then the status is written.

Runs on a worker thread, one plan per node at a time (the round loop keeps a
node with a plan in flight out of the next rounds). Order of writes: the cordon
first (:meth:`Executor.cordon_first`, on the workers' first lane,
:mod:`pitcrew.controller.lanes`), the other actions next, status last, so a
crash in between repeats idempotent actions rather than skipping them. The
exception is a remediation: its intent (action, step, attempt, key) is written
*before* the remediator is called, so a new leader never starts a new rung where
one was begun. The rung it finds, it resumes if the rung is idempotent for its
key (a reset Job by name, a webhook by Idempotency-Key): the old leader may have
died, or lost the apiserver, between the intent and the call, and a start the
API never saw must not wait out the rung's timeout (the chaos suite's apiserver
restarts found exactly that). A reboot is not repeated: its evidence or its
timeout decides. The same holds for the eviction of the operator's own pod, which
a drain makes last and alone (:mod:`pitcrew.core.lifecycle.draining`): the status
that says so is written before the eviction ends this process. Remediators (slow
peers: BMCs, webhooks) run on a pool of their own, so a BMC that takes a minute
never delays the next cordon.

Dry run (global flag or per policy) executes nothing against Nodes, Pods,
Jobs or remediators; it records each would-be action once as an Event and
still writes GPUNode status, which is where an SRE reads what Pitcrew would do.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Executor as Pool
from dataclasses import dataclass, replace
from typing import assert_never

from pitcrew.api.errors import PitcrewError
from pitcrew.api.gpunode import GPUNodeStatus, Phase
from pitcrew.api.policy import DrainTimeoutAction, RemediationAction
from pitcrew.api.vocabulary import LAST_REMEDIATION, RESERVED_TAINT, SPARE_TAINT, account_name
from pitcrew.controller import metrics
from pitcrew.controller.ports import Cluster, EventSink
from pitcrew.controller.settings import OperatorSettings, job_pods
from pitcrew.controller.slurm import SlurmWatch
from pitcrew.controller.store import Store
from pitcrew.core import actions as a
from pitcrew.core import in_place
from pitcrew.core.budgets import BudgetLedger, EvictionPlan
from pitcrew.core.convert import gpu_capacity, training_job
from pitcrew.core.lifecycle import Decision
from pitcrew.core.node_edits import NodeAction
from pitcrew.core.port_types import Backoff
from pitcrew.core.views import PolicyView
from pitcrew.kube import gpunodes, jobs
from pitcrew.kube.events import node_ref, pod_ref
from pitcrew.remediators import RemediationError, RemediationRequest, Remediator
from pitcrew.slurm.control import SlurmError

logger = logging.getLogger(__name__)
RETRY_FIRST, RETRY_MAX = 0.5, 60.0
TAKEN = frozenset({Phase.QUARANTINED, Phase.DRAINING, Phase.REMEDIATING, Phase.RETIRED})
"""Phases of a node whose pods Pitcrew is about to remove, removes or removed: a job's
pods there are the ones replaced, never asked to restart in place."""
Clock = Callable[[], datetime.datetime]
Requeue = Callable[[str, float], None]
"""Decide ``node`` again after ``seconds`` (0: in the next round); any thread."""


@dataclass(frozen=True)
class Plan:
    node: str
    policy: PolicyView
    decision: Decision
    dry_run: bool
    before: GPUNodeStatus


PROGRESS_EVERY = datetime.timedelta(seconds=30)
"""How often a drain's progress alone is written to its GPUNode's status, at most."""
PROGRESS_WRITES_PER_SECOND = 10
"""All drains' progress writes together, at most, when so many drains run that
:data:`PROGRESS_EVERY` each would be more."""


def progress_every(drains: int) -> datetime.timedelta:
    """How often each of ``drains`` concurrent drains may write its progress: 750
    nodes failing at once would otherwise write 25 times a second, on a control plane
    that is busy moving their pods, to tell what a person reads once a minute."""
    spread = datetime.timedelta(seconds=drains / PROGRESS_WRITES_PER_SECOND)
    return max(PROGRESS_EVERY, spread)


def _same_drain(stored: GPUNodeStatus, newer: GPUNodeStatus) -> bool:
    return (
        stored.drain is not None
        and newer.drain is not None
        and stored.drain.started_at == newer.drain.started_at
    )


class NotLeadingError(PitcrewError, RuntimeError):
    """This process's Lease is not renewed: it must not write (a standby may lead)."""


class Executor:
    def __init__(
        self,
        *,
        cluster: Cluster,
        store: Store,
        events: EventSink,
        remediators: Mapping[RemediationAction, Remediator],
        remediation_pool: Pool,
        settings: OperatorSettings,
        clock: Clock,
        requeue: Requeue,
        leading: Callable[[str], bool] = lambda _: True,
        slurm: SlurmWatch | None = None,
    ) -> None:
        self.cluster = cluster
        self.slurm = slurm
        self.leading = leading
        """Whether this process may still act for a pool (its tenure of the pool's Lease,
        by policy name); checked before every write, since a plan can outlast the Lease
        it was decided under."""
        self.store = store
        self.events = events
        self.remediators = remediators
        self.remediation_pool = remediation_pool
        self.settings = settings
        self.clock = clock
        self.requeue = requeue
        self.backoff = Backoff()
        self._lock = threading.Lock()
        self._remediation_errors: dict[str, str] = {}
        self._rungs: dict[str, str] = {}
        """The key of the rung this process last started or resumed, by node."""
        self._ledger = BudgetLedger()
        """What every drain asked of each PodDisruptionBudget that its watch does not
        show yet (:mod:`pitcrew.core.budgets`)."""
        self._recorded: set[tuple[str, str, str]] = set()
        self._waits_said: dict[str, tuple[datetime.datetime | None, set[str]]] = {}
        """Per node, the drain (its start) and what it waits for that was said."""
        self._failures: dict[str, int] = {}
        """Consecutive failed executions per node: a node that keeps failing is retried
        with backoff, never in a tight loop."""
        self._progress: dict[str, GPUNodeStatus] = {}
        """Per node, a drain's progress not written yet (:meth:`_write_status`)."""
        self._waiting_on: dict[str, set[str]] = {}
        """PodDisruptionBudget -> the nodes whose drains wait for it."""
        self._budgets_of: dict[str, set[str]] = {}
        """Node -> the budgets its drain waits for (the same, the other way round)."""
        self._unsaid: dict[str, list[str]] = {}
        """Per node, the pods evicted since its last ``Evicted`` Event."""
        self._progress_written: dict[str, datetime.datetime] = {}
        """Per draining node, when its status was last written."""

    # -- what the round loop asks ---------------------------------------------------------

    def known(self, name: str) -> GPUNodeStatus:
        """The stored status with what the executor learnt since (a remediator that
        failed to start) folded in, so the next decision sees it and escalates."""
        status = self.store.status(name)
        with self._lock:
            progress = self._progress.get(name)
        if progress is not None and _same_drain(status, progress):
            status = status.model_copy(update={"drain": progress.drain})
        remediation = status.remediation
        if remediation is None:
            return status
        with self._lock:
            error = self._remediation_errors.pop(remediation.reference, None)
        if error is None:
            return status
        return status.model_copy(
            update={"remediation": remediation.model_copy(update={"error": error})}
        )

    def owes_progress(self, node: str, now: datetime.datetime) -> bool:
        """Whether ``node``'s drain has progress held back (:meth:`_write_status`) that
        is due: a plan must carry it even if the decision changes nothing more. One not
        due yet waits for the wake-up asked for when it was held, or for the resync (a
        draining node never rests)."""
        with self._lock:
            last = self._progress_written.get(node)
            return node in self._progress and (last is None or now - last >= self._every())

    def _every(self) -> datetime.timedelta:
        """How often each drain may write its progress now; under the lock."""
        return progress_every(len(self._progress_written))

    def waiting_for(self, budget: str) -> list[str]:
        """The nodes whose drains wait for PodDisruptionBudget ``budget`` (its change
        wakes them, and only them: 700 drains woken by every change of any of 375
        budgets decide 700 nodes for each eviction)."""
        with self._lock:
            return sorted(self._waiting_on.get(budget, ()))

    def _wait(self, node: str, budgets: set[str]) -> None:
        """Record that ``node``'s drain now waits for ``budgets``; under the lock."""
        for budget in self._budgets_of.pop(node, set()) - budgets:
            waiting = self._waiting_on.get(budget)
            if waiting is not None:
                waiting.discard(node)
                if not waiting:
                    del self._waiting_on[budget]
        for budget in budgets:
            self._waiting_on.setdefault(budget, set()).add(node)
        if budgets:
            self._budgets_of[node] = budgets

    def forget(self, node: str) -> None:
        """Drop what is kept about a deleted node's drain."""
        with self._lock:
            self._wait(node, set())
            for kept in (self._progress, self._progress_written, self._unsaid, self._waits_said):
                kept.pop(node, None)

    def started(self, node: str, key: str) -> bool:
        """Whether this process started (or resumed) the rung ``key`` on ``node``."""
        with self._lock:
            return self._rungs.get(node) == key

    def record_once(self, node: str, reason: str, message: str) -> None:
        """A warning Event posted once per node, reason and message: dry-run notes and
        refusals that every resync would otherwise repeat."""
        key = (node, reason, message)
        with self._lock:
            if key in self._recorded:
                return
            self._recorded.add(key)
        self._event(node, reason, message, warning=True)

    def release(self, node: str, *, slurm_node: str = "") -> None:
        """Lift Pitcrew's marks from a node no policy manages any more: its cordon and
        taints, its drain of Slurm node ``slurm_node`` (when given), and the drain, rung
        and reservation its status held (a reset rung left there would keep the node's
        agent from opening NVML again, its checks paused, for good)."""
        message = "no GPUHealthPolicy manages this node: Pitcrew's cordon and taints lifted"
        try:
            if self._edit_node(node, a.Uncordon(reason="Unmanaged", message=message)):
                self._event(node, "Unmanaged", message)
            status = self.known(node)
            if status.remediation or status.drain or status.reservation:
                self._write_status(
                    node,
                    status.model_copy(
                        update={
                            "remediation": None,
                            "drain": None,
                            "reservation": None,
                            "repair_under_test": None,
                        }
                    ),
                )
            if slurm_node:
                self._set_slurm_state(
                    node,
                    a.SetSlurmState(
                        node=slurm_node,
                        state="RESUME",
                        reason="SlurmResumed",
                        message=f"Slurm node {slurm_node} resumed: no GPUHealthPolicy "
                        "manages this node",
                    ),
                )
        except Exception:
            metrics.RECONCILE_ERRORS.inc()
            logger.exception("lifting Pitcrew's marks from %s failed; it is retried", node)
            self.requeue(node, RETRY_FIRST)

    # -- a plan ---------------------------------------------------------------------------

    def cordon_first(self, plan: Plan) -> Plan | None:
        """Carry out the plan's cordon alone (:func:`pitcrew.core.actions.cordon_first`);
        the rest of the plan, to :meth:`execute` after it, or None when the cordon
        failed (the node is decided again, with backoff, as after a failed plan)."""
        cordons, rest = a.cordon_first(plan.decision.actions)
        if not cordons or plan.dry_run:
            return plan
        first = replace(plan, decision=replace(plan.decision, actions=cordons))
        if not self._carry_out(first, write_status=False):
            return None
        return replace(plan, decision=replace(plan.decision, actions=rest))

    def execute(self, plan: Plan) -> None:
        self._carry_out(plan, write_status=True)

    def _carry_out(self, plan: Plan, *, write_status: bool) -> bool:
        """The plan's actions, then (``write_status``) its status; whether all went."""
        status = plan.decision.status
        try:
            self._still_leading(plan)
            if any(map(_intent_first, plan.decision.actions)) and not plan.dry_run:
                self._write_status(plan.node, status, intent=True)  # the module docstring
            for action in plan.decision.actions:
                self._still_leading(plan)
                status = self._perform(plan, action, status)
            if not write_status:
                return True
            self._still_leading(plan)
            self._write_status(plan.node, status)
            self._say_evicted(plan.node)
        except NotLeadingError as error:
            # Not a failure of this node: the Lease is renewed again within a second,
            # or it is lost and whoever takes the pool over decides afresh.
            logger.warning("%s", error)
            self.requeue(plan.node, RETRY_FIRST)
            return False
        except Exception:
            metrics.RECONCILE_ERRORS.inc()
            with self._lock:
                failures = self._failures[plan.node] = self._failures.get(plan.node, 0) + 1
            delay = min(RETRY_FIRST * 2 ** (failures - 1), RETRY_MAX)
            logger.exception(
                "executing the decision for %s failed (%d in a row); retried in %.1fs",
                plan.node,
                failures,
                delay,
            )
            self.requeue(plan.node, delay)
            return False
        with self._lock:
            self._failures.pop(plan.node, None)
        if not plan.dry_run:
            metrics.record_decision(
                pool=plan.policy.name, before=plan.before, after=status, now=self.clock()
            )
        return True

    def _still_leading(self, plan: Plan) -> None:
        if not self.leading(plan.policy.name):
            raise NotLeadingError(
                f"not acting on {plan.node}: this process does not hold the Lease of "
                f"pool {plan.policy.name} now"
            )

    def _event(self, node: str, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event on the Node, what ``kubectl describe node`` shows, and only there:
        the GPUNode's status says the same (phase, conditions, history, remediation,
        drain), and a second copy of every Event was a third of a burst's writes on the
        apiserver its cordons wait for."""
        uid = self.store.nodes.get(node, {}).get("metadata", {}).get("uid", "")
        self.events.emit(node_ref(node, uid), reason=reason, message=message, warning=warning)

    def _perform(self, plan: Plan, action: a.Action, status: GPUNodeStatus) -> GPUNodeStatus:  # noqa: PLR0912 - one case per action
        node = plan.node
        if self._performed_in_any_run(node, action):
            return status
        if plan.dry_run:
            description = f"{type(action).__name__}: {action.message}"
            self.record_once(node, f"DryRun{action.reason}", f"dry run, would do {description}")
            return status
        match action:
            case a.Cordon() | a.Uncordon() | a.SetTaint() | a.RemoveTaint():
                if self._edit_node(node, action):
                    self._event(node, action.reason, action.message)
            case a.ReleaseSpare():
                self._release_spare(node, action)
            case a.ReserveSpare():
                self._reserve_spare(node, action)
            case a.Tolerate():
                tolerated = self.cluster.tolerate(
                    action.pods, taint=action.taint, value=action.value
                )
                if tolerated:
                    self._event(node, action.reason, f"{action.message}: {', '.join(tolerated)}")
            case a.Evict():
                return self._evict(plan, action, status)
            case a.ForceDelete():
                deleted = self.cluster.force_delete(action.pods, grace_seconds=action.grace_seconds)
                self._event(
                    node, action.reason, f"{action.message}: {', '.join(deleted)}", warning=True
                )
            case a.RestartInPlace():
                self._restart_in_place(node, action)
            case a.StartProbe():
                self._start_probe(plan, action)
            case a.SetSlurmState():
                self._set_slurm_state(node, action)
            case a.CancelProbe():
                self._cancel_probe(plan, action)
            case a.ConfirmRepair():
                # Only once there is evidence the repair happened: the agent forgets
                # latched findings on this word. A failed write fails the plan, which
                # is retried with backoff; the rung itself is never started again.
                self.cluster.annotate_node(
                    node,
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
                self._event(node, action.reason, action.message)
            case a.Remediate():
                with self._lock:
                    self._rungs[node] = action.key
                self.remediation_pool.submit(self._remediate, plan, action, status)
            case a.Record() | a.PublishChecks():
                pass  # carried out in every run, dry or not: _performed_in_any_run
            case _:
                assert_never(action)
        return status

    def _performed_in_any_run(self, node: str, action: a.Action) -> bool:
        """Events, and configuration: a dry run must see what the policy's checks would
        find, so it publishes them too. False for every other action."""
        if isinstance(action, a.Record):
            self._event(node, action.reason, action.message, warning=action.warning)
            return True
        if isinstance(action, a.PublishChecks):
            checks = action.checks.model_dump(mode="json", by_alias=True, exclude_none=True)
            self.store.put("gpunode", self.cluster.publish_checks(node=node, checks=checks))
            self._event(node, action.reason, action.message)
            return True
        return False

    def _release_spare(self, node: str, action: a.ReleaseSpare) -> None:
        lift = a.RemoveTaint(taint=SPARE_TAINT, reason=action.reason, message=action.message)
        if self._edit_node(action.node, lift):
            self._event(action.node, action.reason, action.message)
            self._event(node, action.reason, f"released spare {action.node}")

    def _reserve_spare(self, node: str, action: a.ReserveSpare) -> None:
        reserve = a.SetTaint(
            taint=RESERVED_TAINT,
            value=action.job,
            reason=action.reason,
            message=action.message,
            replaces=SPARE_TAINT,
        )
        if self._edit_node(action.node, reserve):
            self._event(action.node, action.reason, action.message)
            self._event(node, action.reason, f"spare {action.node} {action.message}")

    def _edit_node(self, node: str, action: NodeAction) -> bool:
        """Apply a node edit and remember the result at once: the next decision for
        this node must not see the Node as it was before its own edit."""
        patched = self.cluster.edit_node(node, action, known=self.store.nodes.get(node))
        if patched is None:
            return False
        self.store.put("node", patched)
        return True

    def _evict(self, plan: Plan, action: a.Evict, status: GPUNodeStatus) -> GPUNodeStatus:
        labels = {
            p.key: (self.store.pods.get(p.key) or {}).get("metadata", {}).get("labels") or {}
            for p in action.pods
        }
        now = self.clock()
        with self._lock:
            # What the budgets listed as disrupted is read before the budgets: a
            # listing is then never newer than the disruptionsAllowed that counts it.
            shown = {key: self.store.disrupted(key) for key in self._ledger.held}
            chosen = self._ledger.take(
                action.pods, labels, self.store.disruption_budgets(), shown=shown, now=now
            )
        # An exception here leaves the room held (for HELD_FOR at most): some of the
        # evictions may have been made.
        result = self.cluster.evict(
            chosen.now,
            backoff=self.backoff,
            now=now,
            parallelism=plan.policy.spec.safety.drain.max_parallel_evictions,
        )
        several = {key for keys in chosen.several.values() for key in keys}
        with self._lock:
            self._ledger.settle(chosen, undone={*result.blocked, *result.gone, *result.skipped})
            self._wait(plan.node, {*chosen.waiting.values(), *several})
        for pod, budget_key in chosen.waiting.items():
            # Not asked for: the budget's next change wakes the drain (no timer, no 429).
            result.budgets.setdefault(pod, budget_key)
        for pod, keys in chosen.several.items():
            result.budgets.setdefault(pod, f"{' + '.join(keys)} (one pod, several budgets)")
        waiting = len(chosen.waiting) + len(chosen.several)
        pool = plan.policy.name
        metrics.EVICTIONS.labels(pool, "evicted").inc(len(result.evicted))
        metrics.EVICTIONS.labels(pool, "blocked").inc(len(result.blocked))
        metrics.EVICTIONS.labels(pool, "failed").inc(len(result.failed))
        if result.evicted:
            with self._lock:  # said with the progress it makes (_say_evicted)
                self._unsaid[plan.node] = [*self._unsaid.get(plan.node, []), *result.evicted]
        if (chosen.waiting or result.blocked) and self._first_wait(plan.node, status):
            message = _blocked_message(chosen.waiting, result.blocked)
            self._event(plan.node, "EvictionBlocked", message, warning=True)
        never = _never_message(chosen, plan.policy)
        if never and self._first_wait(plan.node, status, never):
            self._event(plan.node, "EvictionImpossible", never, warning=True)
        for pod, why in sorted(result.failed.items()):
            self._event(plan.node, "EvictionFailed", f"{pod}: {why}", warning=True)
        if result.blocked or result.skipped:
            # Retried when the backoff ends, not at the next resync.
            self.requeue(plan.node, self.backoff.earliest(self.clock()))
        if waiting:
            metrics.EVICTIONS.labels(pool, "waiting").inc(waiting)
        drain = status.drain
        if drain is None:
            return status
        # The budgets by name (what an SRE looks up), else the refusal as the API said it.
        blocked = ", ".join(sorted(set(result.budgets.values()))) or "; ".join(
            f"{k}: {v}" for k, v in sorted(result.blocked.items())
        )
        blocked = blocked[:1024]
        return status.model_copy(
            update={
                "drain": drain.model_copy(
                    update={
                        "evicted": drain.evicted + len(result.evicted),
                        "blocked_by": blocked or drain.blocked_by
                        if result.blocked or result.skipped or waiting
                        else "",
                    }
                )
            }
        )

    def _say_evicted(self, node: str) -> None:
        """One ``Evicted`` Event for the pods evicted since the last, posted when the
        drain's progress is written (:meth:`_write_status`): an Event per eviction
        round would outnumber the evictions, and client-go's own recorder would
        drop them as spam past its burst."""
        with self._lock:
            if node in self._progress:
                return
            pods = sorted(self._unsaid.pop(node, []))
        if pods:
            message = f"evicted {len(pods)} pods: {', '.join(pods)[:900]}"
            self._event(node, "Evicted", message)

    def _first_wait(self, node: str, status: GPUNodeStatus, what: str = "") -> bool:
        """Whether this is the first time ``node``'s drain waits for a budget or is
        refused an eviction (or, with ``what``, says that): said once per drain. A node
        of thirty apps waits, in turn, for thirty budgets, and a busy budget refuses
        some asks its watch had not caught up with; an Event for each would outnumber
        the evictions. The status's ``drain.blockedBy`` names the budgets as they
        change."""
        drain = status.drain.started_at if status.drain else None
        with self._lock:
            said = self._waits_said.get(node)
            if said is None or said[0] != drain:
                said = self._waits_said[node] = (drain, set())
            if what in said[1]:
                return False
            said[1].add(what)
        return True

    def _restart_in_place(self, node: str, action: a.RestartInPlace) -> None:
        """The job's pods elsewhere that :func:`~pitcrew.core.in_place.survivors` picks,
        from the cache, asked to restart in place; an Event on each pod asked and one on
        the Node. Nodes whose drain began are the ones whose pods are replaced."""
        taken = {name for name in self.store.nodes if self.store.summary(name).phase in TAKEN}
        members = [
            in_place.member(pod)
            for pod in list(self.store.pods.values())
            if (pod.get("metadata") or {}).get("namespace") == action.namespace
            and (identity := training_job(pod)) is not None
            and identity.name == action.job
        ]
        chosen = in_place.survivors(members, since=action.since, taken=taken | {node})
        if not chosen:
            return
        asked = set(
            self.cluster.request_restart(
                [(m.namespace, m.name, m.uid) for m in chosen], value=in_place.encode(action.since)
            )
        )
        metrics.RESTARTS_IN_PLACE.inc(len(asked))
        told = f"{action.message} (the drain of {node} began {in_place.encode(action.since)})"
        for m in chosen:
            if m.key in asked:
                self.events.emit(
                    pod_ref(m.namespace, m.name, m.uid), reason="RestartRequested", message=told
                )
        self._event(node, action.reason, f"{action.message}: {len(asked)} pods asked")

    def _set_slurm_state(self, node: str, action: a.SetSlurmState) -> None:
        """A transient failure (slurmctld out of reach) fails the plan, retried with
        backoff; a permanent one (Slurm refuses the node) is said once and left."""
        if self.slurm is None:
            return  # no Slurm client: no Slurm view either, so never decided
        try:
            self.slurm.slurm.update(action.node, action.state, action.slurm_reason)
        except SlurmError as error:
            if error.transient:
                raise
            self.record_once(node, "SlurmRefused", f"Slurm node {action.node}: {error}")
            return
        self.slurm.poked.set()  # read Slurm again now: the drain may already be done
        self._event(node, action.reason, action.message)

    def _cancel_probe(self, plan: Plan, action: a.CancelProbe) -> None:
        if self.cluster.delete_job(namespace=self.settings.namespace, name=action.name):
            self._event(plan.node, action.reason, f"deleted Job {action.name}: {action.message}")

    def _start_probe(self, plan: Plan, action: a.StartProbe) -> None:
        spec = plan.policy.spec.validation
        job = jobs.probe_job(
            name=action.name,
            namespace=self.settings.namespace,
            node=plan.node,
            suite=action.suite,
            gpus=gpu_capacity(self.store.nodes.get(plan.node, {})),
            image=self.settings.jobs.probe_image,
            deadline_seconds=int(spec.timeout.total_seconds()),
            priority_class=spec.priority_class_name,
            service_account=account_name("probe", self.settings.jobs.account_prefix),
            resources=self.settings.jobs.probe_resources,
            pods=job_pods(self.settings.jobs),
        )
        if self.cluster.create_job(job):
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
        ladders = plan.policy.spec.remediation.ladders
        timeout = ladders.rung_timeout(remediation.fault_class, action.step)
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
            self._still_leading(plan)
            description = self.remediators[action.action].start(request)
        except NotLeadingError as error:
            # Not started, and not failed: whoever leads next resumes it.
            logger.warning("%s", error)
            with self._lock:
                self._rungs.pop(plan.node, None)
            self.requeue(plan.node, RETRY_FIRST)
            return
        except RemediationError as error:
            self._event(plan.node, "RemediationFailed", f"{action.action}: {error}", warning=True)
            self._failed(action.key, str(error), plan.node)
            return
        except Exception as error:
            logger.exception("remediation %s on %s failed", action.key, plan.node)
            self._failed(action.key, f"{type(error).__name__}: {error}", plan.node)
            return
        said = f"{description} ({action.message})" if action.message else description
        self._event(plan.node, action.reason, said)

    def _failed(self, key: str, error: str, node: str) -> None:
        with self._lock:
            self._remediation_errors[key] = error[:1024]
        self.requeue(node, 0)

    def _write_status(self, node: str, status: GPUNodeStatus, *, intent: bool = False) -> None:
        """Write what changed. A drain's progress alone (pods left, evicted, the budget
        it waits for) is written at most every :data:`PROGRESS_EVERY`, longer when
        many drains run (:func:`progress_every`): fifty drains woken by every budget
        change would otherwise write once per eviction. Until then :meth:`known`
        hands it to the next decision, which writes it. An ``intent`` (written before
        the actions, :func:`_intent_first`) is never held: the process may not live
        to the next decision."""
        owned = gpunodes.AGENT_FIELDS | gpunodes.PROBE_FIELDS | gpunodes.PRE_PULL_FIELDS
        fields = gpunodes.status_fields(status, exclude=owned)
        current = self.store.status(node)
        if gpunodes.status_fields(current, exclude=owned) == fields:
            with self._lock:
                self._progress.pop(node, None)
            return
        now = self.clock()
        with self._lock:
            last = self._progress_written.get(node)
            every = self._every()
            hold = (
                not intent
                and last is not None
                and now - last < every
                and _same_drain(current, status)
                and gpunodes.status_fields(
                    current.model_copy(update={"drain": status.drain}), exclude=owned
                )
                == fields
            )
            if hold:
                self._progress[node] = status
        if hold and last is not None:
            self.requeue(node, (last + every - now).total_seconds())
            return
        written = self.cluster.apply_gpunode_status(node=node, status=fields)
        self.store.put("gpunode", written)
        with self._lock:
            self._progress.pop(node, None)
            if status.drain is None:
                self._progress_written.pop(node, None)
            else:
                self._progress_written[node] = now


def _intent_first(action: a.Action) -> bool:
    """Whether the plan's status must be written before ``action``: a remediation, or
    the eviction (or deletion) of the operator's own pod, which ends this process."""
    if isinstance(action, a.Remediate):
        return True
    return isinstance(action, a.Evict | a.ForceDelete) and any(p.operator for p in action.pods)


def _never_message(chosen: EvictionPlan, policy: PolicyView) -> str:
    """What no eviction can pass, said once per drain and per content
    (:meth:`Executor._first_wait`): pods more than one budget covers, which the
    eviction API refuses whatever the budgets allow, and budgets that keep every pod
    they expect; empty when there is none. The drain waits for them to change, then
    its timeout applies, as it says."""
    spec = policy.spec.safety.drain
    said = []
    if chosen.several:
        pods = "; ".join(
            f"{pod}: {', '.join(keys)}" for pod, keys in sorted(chosen.several.items())
        )
        said.append(
            f"{len(chosen.several)} pods are covered by more than one PodDisruptionBudget "
            f"({pods[:600]}): the eviction API refuses such a pod whatever the budgets allow, "
            "so it is not asked for until all but one of its budgets are gone"
        )
    if chosen.keeping:
        budgets = ", ".join(sorted(chosen.keeping))[:600]
        said.append(
            f"PodDisruptionBudgets {budgets} keep every pod they expect (maxUnavailable 0, or "
            "minAvailable as large as the app): no ready pod of theirs is evicted until the "
            "budget or the app changes"
        )
    if not said:
        return ""
    timeout = (
        "the drain waits for that (onTimeout: wait)"
        if spec.on_timeout is DrainTimeoutAction.WAIT
        else f"after {spec.timeout} the drain's onTimeout ({spec.on_timeout}) applies"
    )
    return f"{'; '.join(said)}; {timeout}"


def _blocked_message(waiting: Mapping[str, str], refused: Mapping[str, str]) -> str:
    """What holds a drain back, said once (:meth:`Executor._first_wait`): the pods that
    wait for budgets allowing no disruption, and those the API refused."""
    said = []
    if waiting:
        budgets = ", ".join(sorted(set(waiting.values())))[:600]
        said.append(
            f"{len(waiting)} pods wait for PodDisruptionBudgets {budgets} that allow no "
            "disruption now; each is evicted when its budget allows"
        )
    if refused:
        pods = "; ".join(f"{pod}: {why}" for pod, why in sorted(refused.items()))[:600]
        said.append(f"the API refused {len(refused)} evictions ({pods}); retried with backoff")
    return "; ".join(said) + " (status.drain.blockedBy follows what blocks the drain)"
