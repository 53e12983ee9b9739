"""Evict pods through the Eviction API, the way ``kubectl drain`` does.

The apiserver enforces PodDisruptionBudgets on evictions: a 429 means the
budget does not allow this pod to go now, so the pod is retried later with
backoff (per pod, in memory: after a restart the first retry is immediate,
which is harmless since a refused eviction did nothing). 404 means the pod is
already gone. Each pod's own grace period applies (the eviction carries no
override), DaemonSet and mirror pods are never selected (see
:attr:`pitcrew.core.views.PodView.evictable`). A forced drain deletes pods
directly, which bypasses PDBs and is only done when the policy says so.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_MANAGER
from pitcrew.core.views import PodView

BACKOFF_START = datetime.timedelta(seconds=1)
BACKOFF_MAX = datetime.timedelta(seconds=8)


@dataclass
class EvictionResult:
    evicted: list[str] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)
    """pod key -> why the apiserver refused (PDB message)."""
    gone: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """pod key -> the error: any other answer, or none (the eviction may have been made)."""
    skipped: list[str] = field(default_factory=list)
    """In backoff after an earlier refusal."""
    budgets: dict[str, str] = field(default_factory=dict)
    """pod key -> ``namespace/name`` of the PodDisruptionBudget that refused it."""


@dataclass
class Backoff:
    """Per-pod backoff after a PDB refusal."""

    next_try: dict[str, datetime.datetime] = field(default_factory=dict)
    delay: dict[str, datetime.timedelta] = field(default_factory=dict)

    def ready(self, key: str, now: datetime.datetime) -> bool:
        return now >= self.next_try.get(key, now)

    def refused(self, key: str, now: datetime.datetime) -> None:
        delay = min(self.delay.get(key, BACKOFF_START / 2) * 2, BACKOFF_MAX)
        self.delay[key] = delay
        self.next_try[key] = now + delay

    def earliest(self, now: datetime.datetime) -> float:
        """Seconds until the first pod in backoff may be retried."""
        waits = [(t - now).total_seconds() for t in self.next_try.values()]
        return max(0.1, min((w for w in waits if w > 0), default=BACKOFF_START.total_seconds()))

    def forget(self, key: str) -> None:
        self.next_try.pop(key, None)
        self.delay.pop(key, None)


_BUDGET = re.compile(r"[Tt]he disruption budget (\S+) needs")


def budget_name(error: client.ApiException, *, namespace: str) -> str:
    """``namespace/name`` of the PodDisruptionBudget that refused an eviction, read from
    the 429's causes (``The disruption budget <name> needs N healthy pods ...``);
    empty when the answer names none (a 429 for throttling, say)."""
    try:
        body = json.loads(error.body or "{}")
    except (ValueError, TypeError):
        return ""
    texts = [c.get("message", "") for c in (body.get("details") or {}).get("causes") or []]
    for text in [*texts, body.get("message", "")]:
        found = _BUDGET.search(str(text))
        if found:
            return f"{namespace}/{found.group(1)}"
    return ""


def _message(error: client.ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message", error.reason))
    except (ValueError, AttributeError):
        return str(error.reason)


def evict(
    api: client.ApiClient,
    pods: Iterable[PodView],
    *,
    backoff: Backoff,
    now: datetime.datetime,
    parallelism: int,
) -> EvictionResult:
    core = client.CoreV1Api(api)
    result = EvictionResult()
    todo = []
    for pod in pods:
        if backoff.ready(pod.key, now):
            todo.append(pod)
        else:
            result.skipped.append(pod.key)

    def one(pod: PodView) -> None:
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace)
        )
        try:
            core.create_namespaced_pod_eviction(
                pod.name, pod.namespace, body, field_manager=OPERATOR_MANAGER
            )
            result.evicted.append(pod.key)
            backoff.forget(pod.key)
        except client.ApiException as error:
            if error.status == 429:
                result.blocked[pod.key] = _message(error)
                budget = budget_name(error, namespace=pod.namespace)
                if budget:
                    result.budgets[pod.key] = budget
                backoff.refused(pod.key, now)
            elif error.status == 404:
                result.gone.append(pod.key)
                backoff.forget(pod.key)
            else:
                result.failed[pod.key] = f"{error.status}: {_message(error)}"
        except Exception as error:  # no answer (timeout, reset): it may have been made
            result.failed[pod.key] = f"{type(error).__name__}: {error}"

    with ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
        list(pool.map(one, todo))
    return result


def force_delete(api: client.ApiClient, pods: Iterable[PodView]) -> list[str]:
    core = client.CoreV1Api(api)
    deleted = []
    for pod in pods:
        try:
            core.delete_namespaced_pod(
                pod.name, pod.namespace, grace_period_seconds=pod.grace_seconds
            )
            deleted.append(pod.key)
        except client.ApiException as error:
            if error.status != 404:
                raise
    return deleted
