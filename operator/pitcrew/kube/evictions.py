"""Evict pods through the Eviction API, the way ``kubectl drain`` does.

The apiserver enforces PodDisruptionBudgets on evictions: a 429 means the
budget does not allow this pod to go now, so the pod is retried later with
backoff (per pod, in memory: after a restart the first retry is immediate,
which is harmless since a refused eviction did nothing). 404 means the pod is
already gone. Each pod's own grace period applies (the eviction carries no
override), DaemonSet and mirror pods are never selected (see
:attr:`pitcrew.core.views.PodView.evictable`). A forced drain deletes pods
directly, which bypasses PDBs and is only done when the policy says so; a pod
already being deleted is deleted with grace period 0 (:func:`force_grace`), as
``kubectl delete --force --grace-period=0`` does, since a second delete with its
own grace period changes nothing.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from pitcrew.api.vocabulary import OPERATOR_MANAGER
from pitcrew.core.port_types import Backoff, EvictionResult
from pitcrew.core.views import PodView

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


def force_grace(pod: PodView, at_most: int | None = None) -> int:
    """The grace period a forced delete gives ``pod``: its own to a running pod (it may
    still stop cleanly, without a budget's leave), ``at_most`` that (a pod whose job
    loses its progress anyway), none to one already being deleted, which had its grace
    and is stuck (a kubelet that never confirms, on a broken node): grace 0 removes it
    from the API at once."""
    if pod.terminating:
        return 0
    return pod.grace_seconds if at_most is None else min(pod.grace_seconds, at_most)


def force_delete(
    api: client.ApiClient, pods: Iterable[PodView], *, grace_seconds: int | None = None
) -> list[str]:
    core = client.CoreV1Api(api)
    deleted = []
    for pod in pods:
        try:
            core.delete_namespaced_pod(
                pod.name, pod.namespace, grace_period_seconds=force_grace(pod, grace_seconds)
            )
            deleted.append(pod.key)
        except client.ApiException as error:
            if error.status != 404:
                raise
    return deleted


def delete_exact(api: client.ApiClient, pods: Iterable[tuple[str, str, str]]) -> list[str]:
    """Delete each pod given as (namespace, name, UID), with its own grace period, only
    while it is the object of that UID (a delete precondition): a pod its launcher
    recreated under the same name since it was judged is never deleted. The pods
    deleted (or already gone), as ``namespace/name``."""
    core = client.CoreV1Api(api)
    deleted = []
    for namespace, name, uid in pods:
        try:
            core.delete_namespaced_pod(
                name, namespace, body=client.V1DeleteOptions(preconditions={"uid": uid})
            )
        except client.ApiException as error:
            if error.status not in (404, 409):  # gone, or another pod by now
                raise
            if error.status == 409:
                continue
        deleted.append(f"{namespace}/{name}")
    return deleted
