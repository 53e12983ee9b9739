"""Which pods a drain may evict now, by their PodDisruptionBudgets.

The apiserver enforces a budget on every eviction and answers 429 when it does not
allow one; asking for every pod and retrying each refusal on a timer, as a naive
drain does, spends most of a large drain's requests on refusals. Pitcrew reads the
budgets' ``status.disruptionsAllowed`` from its watch and asks only for as many
pods per budget as it allows, counting the evictions it made since the version of
the budget it read (the apiserver lowers ``disruptionsAllowed`` on each eviction,
and the watch reports it a moment later). A pod waiting for a budget is asked for
again when the budget changes, not on a timer. The apiserver stays the authority:
a budget Pitcrew has not seen yet, or a race, still ends in a 429, retried with
backoff as before. Only evictions the apiserver accepted are counted, and only for
a short while: a refused request (a throttled apiserver answers 429 too) spends
nothing, and a watch that lags cannot hold a drain for longer than that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pitcrew.core.convert import matches
from pitcrew.core.views import PodView


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
