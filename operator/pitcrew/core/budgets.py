"""Which pods a drain may evict now, by their PodDisruptionBudgets.

The apiserver enforces a budget on every eviction and answers 429 when it does not
allow one; asking for every pod and retrying each refusal on a timer, as a naive
drain does, spends most of a large drain's requests on refusals. Pitcrew reads the
budgets' ``status.disruptionsAllowed`` from its watch and asks only for as many
pods per budget as it allows, less what its :class:`BudgetLedger` holds: the
evictions asked for and not answered yet (fifty drains on worker threads share
thirty budgets, and each must see the room the others took), and those accepted
that the watched budget does not show yet. The apiserver lists an evicted pod in
the budget's ``status.disruptedPods`` in the same write that lowers
``disruptionsAllowed``, so an accepted eviction stops being held once a version
newer than the one it was planned from lists its pod, and in any case after
:data:`HELD_FOR` (a watch that lags or restarts holds a drain no longer). An
eviction whose answer never came (a timeout, a reset connection) is held as if
accepted: it may have been. A pod waiting for a budget is asked for again
when the budget changes, not on a timer. The apiserver stays the authority: a
budget Pitcrew has not seen yet, or a race, still ends in a 429, retried with
backoff as before. A refused request (a throttled apiserver answers 429 too)
holds nothing.

Which pods count against a budget at all is the apiserver's rule, modelled exactly by
:func:`eviction_rule` (read it beside ``EvictionREST.Create`` in Kubernetes'
``pkg/registry/core/pod/storage/eviction.go``): a Pending pod, and an unready one its
budget lets go, is evicted at once and holds no room, as ``kubectl drain`` finds; a pod
that more than one budget covers is refused by the apiserver whatever they allow, so
it is not asked for, and the drain says so and waits for its timeout.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pitcrew.core.convert import matches
from pitcrew.core.views import PodView

HELD_FOR = datetime.timedelta(seconds=30)
"""How long an accepted eviction is held against a budget whose watched versions
have not listed its pod: a lagging watch holds a drain no longer than this."""

ALWAYS_ALLOW = "AlwaysAllow"
"""``spec.unhealthyPodEvictionPolicy`` that lets every unready pod go."""
MAX_DISRUPTED_PODS = 2000
"""The apiserver's ``MaxDisruptedPodSize``: a budget that lists more disrupted pods
than this refuses every eviction (403) until its controller catches up."""


@dataclass(frozen=True)
class Budget:
    key: str
    """``namespace/name``."""
    namespace: str
    selector: Mapping[str, Any]
    allowed: int
    version: str
    """Its resourceVersion: evictions made since this version are not in ``allowed``."""
    current_healthy: int = 0
    desired_healthy: int = 0
    expected_pods: int = 0
    unhealthy_policy: str = ""
    """``spec.unhealthyPodEvictionPolicy``; empty is the default, ``IfHealthyBudget``."""
    synced: bool = True
    """``status.observedGeneration`` has caught up with ``metadata.generation``: the
    apiserver refuses (429) every eviction counted against a budget not synced yet."""
    disrupted: int = 0
    """How many pods ``status.disruptedPods`` lists."""

    @property
    def room(self) -> int:
        """Evictions of ready pods the apiserver allows now (``checkAndDecrement``)."""
        if not self.synced or self.disrupted > MAX_DISRUPTED_PODS:
            return 0
        return max(0, self.allowed)

    @property
    def keeps_every_pod(self) -> bool:
        """It wants every pod it expects healthy (``maxUnavailable: 0``, or
        ``minAvailable`` as large as the app): no eviction of a ready pod ever passes
        until the budget or the app changes."""
        return 0 < self.expected_pods <= self.desired_healthy


def budget(obj: Mapping[str, Any]) -> Budget | None:
    """A PodDisruptionBudget as watched; None for one that selects nothing (a null
    selector matches no pod in policy/v1)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    if selector is None:
        return None
    status = obj.get("status") or {}
    namespace = str(meta.get("namespace", ""))
    return Budget(
        key=f"{namespace}/{meta.get('name', '')}",
        namespace=namespace,
        selector=selector,
        allowed=int(status.get("disruptionsAllowed") or 0),
        version=str(meta.get("resourceVersion", "")),
        current_healthy=int(status.get("currentHealthy") or 0),
        desired_healthy=int(status.get("desiredHealthy") or 0),
        expected_pods=int(status.get("expectedPods") or 0),
        unhealthy_policy=str(spec.get("unhealthyPodEvictionPolicy") or ""),
        synced=int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0),
        disrupted=len(status.get("disruptedPods") or {}),
    )


class Gate(Enum):
    """What the apiserver does with an eviction, before it looks at any budget's room."""

    FREE = "free"
    """Deleted without counting against a budget: the pod is Pending, finished or
    already being deleted, no budget covers it, or it is unready and its budget lets
    it go."""
    BUDGET = "budget"
    """Counted against its one budget: made only while the budget has room."""
    SEVERAL = "several"
    """Refused (500, ``This pod has more than one PodDisruptionBudget``) whatever the
    budgets allow, for as long as more than one covers the pod."""


@dataclass(frozen=True)
class Rule:
    gate: Gate
    budgets: tuple[str, ...] = ()
    """The budgets that cover the pod (``namespace/name``), in the order given."""
    why: str = ""
    """Why, for a message."""


def eviction_rule(pod: PodView, covering: Sequence[Budget]) -> Rule:
    """What the apiserver does when asked to evict ``pod``, whose namespace's budgets
    matching its labels are ``covering``; the rules of ``EvictionREST.Create`` in the
    order it applies them:

    1. ``canIgnorePDB``: a pod Pending, Succeeded or Failed, or already being deleted,
       is deleted without a look at any budget, however many cover it.
    2. No budget covers it: deleted. More than one: refused (500), every time.
    3. One budget and an unready pod (``IsPodReady`` false): deleted without counting
       under ``unhealthyPodEvictionPolicy: AlwaysAllow``; under ``IfHealthyBudget`` (or
       none) only while the budget is healthy, ``currentHealthy >= desiredHealthy``
       and ``desiredHealthy > 0``.
    4. Otherwise counted against the budget (``checkAndDecrement``; its room is
       :attr:`Budget.room`).
    """
    keys = tuple(b.key for b in covering)
    if pod.pending or pod.finished or pod.terminating:
        return Rule(Gate.FREE, keys, "not running: no budget is asked")
    if not covering:
        return Rule(Gate.FREE, keys, "no budget covers it")
    if len(covering) > 1:
        return Rule(Gate.SEVERAL, keys, "more than one budget covers it")
    only = covering[0]
    if not pod.ready:
        if only.unhealthy_policy == ALWAYS_ALLOW:
            return Rule(Gate.FREE, keys, "unready, and its budget always lets such pods go")
        if only.current_healthy >= only.desired_healthy > 0:
            return Rule(Gate.FREE, keys, "unready, and its budget is healthy without it")
    return Rule(Gate.BUDGET, keys, "counted against its budget")


@dataclass(frozen=True)
class EvictionPlan:
    now: tuple[PodView, ...]
    waiting: dict[str, str]
    """pod key -> the budget (``namespace/name``) that allows no more disruptions."""
    covering: dict[str, tuple[str, ...]]
    """pod key -> the budgets each pod asked for counts against."""
    several: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """pod key -> the budgets that cover it, for a pod more than one covers: its
    eviction can never pass while they do, so it is not asked for."""
    keeping: frozenset[str] = frozenset()
    """The budgets waited for that keep every pod they expect
    (:attr:`Budget.keeps_every_pod`): no wait for them ends by itself."""


def plan_evictions(
    pods: Sequence[PodView],
    labels: Mapping[str, Mapping[str, str]],
    budgets: Iterable[Budget],
    spent: Mapping[str, int],
) -> EvictionPlan:
    """The pods to evict now, by :func:`eviction_rule`: every pod no budget counts,
    and under each budget at most its :attr:`Budget.room` less ``spent`` (evictions
    already made since the version read)."""
    by_namespace: dict[str, list[Budget]] = {}
    for found in budgets:
        by_namespace.setdefault(found.namespace, []).append(found)
    room = {b.key: b.room - spent.get(b.key, 0) for found in by_namespace.values() for b in found}
    now: list[PodView] = []
    waiting: dict[str, str] = {}
    counted: dict[str, tuple[str, ...]] = {}
    several: dict[str, tuple[str, ...]] = {}
    keeping: set[str] = set()
    for pod in pods:
        pod_labels = dict(labels.get(pod.key) or {})
        covering = [
            b for b in by_namespace.get(pod.namespace, []) if matches(dict(b.selector), pod_labels)
        ]
        rule = eviction_rule(pod, covering)
        if rule.gate is Gate.SEVERAL:
            several[pod.key] = tuple(sorted(rule.budgets))
            continue
        if rule.gate is Gate.BUDGET:
            (key,) = rule.budgets
            if room[key] <= 0:
                waiting[pod.key] = key
                if covering[0].keeps_every_pod:
                    keeping.add(key)
                continue
            room[key] -= 1
            counted[pod.key] = (key,)
        else:
            counted[pod.key] = ()
        now.append(pod)
    return EvictionPlan(
        now=tuple(now),
        waiting=waiting,
        covering=counted,
        several=several,
        keeping=frozenset(keeping),
    )


@dataclass
class BudgetLedger:
    """The evictions the watched budgets do not count yet, per budget: one ledger for
    all drains, so concurrent drains divide a budget's room instead of each asking
    for all of it. Not thread-safe: its caller holds a lock around each call."""

    held: dict[str, dict[str, tuple[datetime.datetime, int]]] = field(default_factory=dict)
    """budget key -> pod key -> when its eviction was asked for, and the budget's
    resourceVersion it was planned from."""
    evicted: dict[str, datetime.datetime] = field(default_factory=dict)
    """pod key -> when the apiserver accepted its eviction: not asked for again while
    the pod watch has yet to show it terminating, unless that takes :data:`HELD_FOR`."""

    def take(
        self,
        pods: Sequence[PodView],
        labels: Mapping[str, Mapping[str, str]],
        budgets: Iterable[Budget],
        *,
        shown: Mapping[str, Mapping[str, int]],
        now: datetime.datetime,
    ) -> EvictionPlan:
        """Plan the evictions ``pods`` may have now and hold their room until
        :meth:`settle`. ``shown[budget]`` maps the pods the budget's watched versions
        listed as disrupted to the latest such version; read it before ``budgets``,
        so that a version counted in it is counted in ``budgets`` too."""
        for key, pods_held in list(self.held.items()):
            listed = shown.get(key) or {}
            kept = {
                pod: (since, planned)
                for pod, (since, planned) in pods_held.items()
                if listed.get(pod.split("/", 1)[-1], -1) <= planned and now - since < HELD_FOR
            }
            if kept:
                self.held[key] = kept
            else:
                del self.held[key]
        self.evicted = {pod: at for pod, at in self.evicted.items() if now - at < HELD_FOR}
        pending = [pod for pod in pods if pod.key not in self.evicted]
        spent = {k: len(v) for k, v in self.held.items()}
        budgets = list(budgets)
        versions = {b.key: _int(b.version) for b in budgets}
        chosen = plan_evictions(pending, labels, budgets, spent)
        for pod in chosen.now:
            for key in chosen.covering[pod.key]:
                self.held.setdefault(key, {})[pod.key] = (now, versions[key])
            self.evicted[pod.key] = now  # until settled: asked for already
        return chosen

    def settle(self, chosen: EvictionPlan, undone: Collection[str]) -> None:
        """Give back the room of the pods whose eviction certainly did nothing (refused,
        already gone); accepted ones, and those with no answer, stay held."""
        for pod, keys in chosen.covering.items():
            if pod not in undone:
                continue
            self.evicted.pop(pod, None)
            for key in keys:
                self.held.get(key, {}).pop(pod, None)


def _int(version: str) -> int:
    """A resourceVersion as a number (etcd's revision); -1 when it is not one, so any
    listing counts as newer."""
    try:
        return int(version)
    except ValueError:
        return -1
