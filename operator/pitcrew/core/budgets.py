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
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pitcrew.core.convert import matches
from pitcrew.core.views import PodView

HELD_FOR = datetime.timedelta(seconds=30)
"""How long an accepted eviction is held against a budget whose watched versions
have not listed its pod: a lagging watch holds a drain no longer than this."""


@dataclass(frozen=True)
class Budget:
    key: str
    """``namespace/name``."""
    namespace: str
    selector: Mapping[str, Any]
    allowed: int
    version: str
    """Its resourceVersion: evictions made since this version are not in ``allowed``."""


def budget(obj: Mapping[str, Any]) -> Budget | None:
    """A PodDisruptionBudget as watched; None for one that selects nothing (a null
    selector matches no pod in policy/v1)."""
    meta = obj.get("metadata") or {}
    selector = (obj.get("spec") or {}).get("selector")
    if selector is None:
        return None
    allowed = (obj.get("status") or {}).get("disruptionsAllowed") or 0
    namespace = str(meta.get("namespace", ""))
    return Budget(
        key=f"{namespace}/{meta.get('name', '')}",
        namespace=namespace,
        selector=selector,
        allowed=int(allowed),
        version=str(meta.get("resourceVersion", "")),
    )


@dataclass(frozen=True)
class EvictionPlan:
    now: tuple[PodView, ...]
    waiting: dict[str, str]
    """pod key -> the budget (``namespace/name``) that allows no more disruptions."""
    covering: dict[str, tuple[str, ...]]
    """pod key -> the budgets each pod asked for counts against."""


def plan_evictions(
    pods: Sequence[PodView],
    labels: Mapping[str, Mapping[str, str]],
    budgets: Iterable[Budget],
    spent: Mapping[str, int],
) -> EvictionPlan:
    """The pods to evict now: every pod no budget covers, and under each budget at most
    its ``disruptionsAllowed`` less ``spent`` (evictions already made since the version
    read). A pod two budgets cover needs room in both."""
    by_namespace: dict[str, list[Budget]] = {}
    for found in budgets:
        by_namespace.setdefault(found.namespace, []).append(found)
    room = {
        b.key: b.allowed - spent.get(b.key, 0) for found in by_namespace.values() for b in found
    }
    now: list[PodView] = []
    waiting: dict[str, str] = {}
    counted: dict[str, tuple[str, ...]] = {}
    for pod in pods:
        pod_labels = dict(labels.get(pod.key) or {})
        covering = [
            b.key
            for b in by_namespace.get(pod.namespace, [])
            if matches(dict(b.selector), pod_labels)
        ]
        full = next((key for key in covering if room[key] <= 0), None)
        if full is not None:
            waiting[pod.key] = full
            continue
        for key in covering:
            room[key] -= 1
        counted[pod.key] = tuple(covering)
        now.append(pod)
    return EvictionPlan(now=tuple(now), waiting=waiting, covering=counted)


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
