"""Hung training jobs, judged from the cache on the accountant's timer, and acted on.

Each tick, every training job Pitcrew discovered (its pods grouped by namespace and
launcher, :func:`pitcrew.core.convert.training_job`) is judged by
:func:`pitcrew.core.hangs.judge` from its pods' heartbeats, under the policy of the
pool most of its pods run in. A hang is acted on once per stall:

- each node it is blamed on gets a verdict (``Store.hangs``, read by the round as
  ``NodeState.hang``), which the lifecycle quarantines with reason ``Hang``, through
  the breaker like any fault; the verdict stands while the node is in service, at
  most :data:`VERDICT_KEPT`;
- the job's pods are deleted, so its launcher starts them again: exactly the pods
  judged, each bound to its UID (a delete precondition), never a pod found by a label
  alone; in a dry run (the operator's or the policy's) an Event says what would be
  done and nothing is deleted;
- ``pitcrew_job_hangs_total{reason}`` counts it, by the evidence it was blamed on.

Deletes and Events go out on a thread pool (:class:`Restarter`): the accountant's
tick reads the cache only.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import HEARTBEAT_ANNOTATION
from pitcrew.client.progress import MalformedProgressError, parse_heartbeat
from pitcrew.controller import metrics
from pitcrew.controller.store import Store
from pitcrew.core.convert import job_pod
from pitcrew.core.evidence import worst_finding
from pitcrew.core.hangs import Heartbeat, RankPod, judge
from pitcrew.kube.events import pod_ref

logger = logging.getLogger(__name__)
VERDICT_KEPT = datetime.timedelta(minutes=10)
"""How long a node blamed for a hang stays blamed while it is still in service (the
breaker refused to take it out, say): the job has restarted since, elsewhere or not."""


@dataclass(frozen=True, kw_only=True)
class Restart:
    """The pods of a hung job to delete: (namespace, name, UID) each."""

    job: str
    pods: tuple[tuple[str, str, str], ...]
    message: str
    dry_run: bool


class HangWatch:
    def __init__(
        self,
        store: Store,
        *,
        restart: Callable[[Restart], None],
        dry_run: bool = False,
        leading: Callable[[str], bool] = lambda _: True,
    ) -> None:
        self.store = store
        self.leading = leading
        """Whether this replica leads a pool: a job is judged (and restarted) only by
        the leader of the pool it runs in."""
        self.restart = restart
        self.dry_run = dry_run
        """The operator's dry run: Events only, whatever the policy says."""
        self.acted: dict[str, datetime.datetime] = {}
        """Each job's stall already acted on, by its last step: one restart per stall."""
        self.verdicts: dict[str, tuple[str, datetime.datetime]] = {}

    def tick(
        self,
        jobs: Mapping[str, Sequence[dict[str, Any]]],
        pools: Mapping[str, str],
        now: datetime.datetime,
    ) -> set[str]:
        """Judge each job (its pods now in the cluster) under its pool's policy; the
        nodes whose verdict changed, to decide again."""
        woken: set[str] = set()
        for job, pods in sorted(jobs.items()):
            woken |= self._judge(job, pods, pools.get(job, ""), now)
        for job in set(self.acted) - set(jobs):
            del self.acted[job]
        for node, (_, since) in list(self.verdicts.items()):
            phase = self.store.summary(node).phase if node in self.store.nodes else None
            if phase is not Phase.HEALTHY or now - since > VERDICT_KEPT:
                del self.verdicts[node]
                woken.add(node)
        self.store.hangs = {node: why for node, (why, _) in self.verdicts.items()}
        return woken

    def _judge(
        self, job: str, pods: Sequence[dict[str, Any]], pool: str, now: datetime.datetime
    ) -> set[str]:
        policy = self.store.policy(pool) if pool else None
        if policy is None or policy.spec.safety.paused or not self.leading(pool):
            return set()
        ranks = [_rank_pod(pod) for pod in pods]
        nodes = {r.node for r in ranks if r.node}
        findings = {
            n: found.reason
            for n in nodes
            if n in self.store.nodes and (found := worst_finding(self.store.status(n)))
        }
        stragglers = {n: why for n, why in self.store.stragglers.items() if n in nodes}
        verdict = judge(
            job, ranks, policy.spec.hangs, now=now, findings=findings, stragglers=stragglers
        )
        hang = verdict.hang
        if hang is None or self.acted.get(job) == hang.last_step:
            return set()
        self.acted[job] = hang.last_step
        logger.warning("%s", hang.message)
        metrics.JOB_HANGS.labels(hang.blame).inc()
        woken = set()
        for node, why in hang.culprits.items():
            if len(self.store.policies_of(node)) == 1 and node in self.store.nodes:
                self.verdicts[node] = (why, now)
                woken.add(node)
        self.restart(
            Restart(
                job=job,
                pods=tuple(_identity(pod) for pod in pods),
                message=hang.message,
                dry_run=self.dry_run or policy.spec.safety.dry_run,
            )
        )
        return woken


def _rank_pod(pod: dict[str, Any]) -> RankPod:
    meta = pod.get("metadata") or {}
    running = (pod.get("status") or {}).get("phase") == "Running"
    started = job_pod(pod, gpus=0, peak=None, gone=False).started_at
    return RankPod(
        key=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        running=running and meta.get("deletionTimestamp") is None,
        heartbeat=_heartbeat((meta.get("annotations") or {}).get(HEARTBEAT_ANNOTATION)),
        started_at=started,
    )


def _heartbeat(text: Any) -> Heartbeat | None:
    """A pod's heartbeat; a missing or malformed one is none (it blames nobody)."""
    if not text:
        return None
    try:
        return parse_heartbeat(str(text))
    except MalformedProgressError:
        return None


def _identity(pod: dict[str, Any]) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", "")))


class Restarter:
    """Carries out :class:`Restart` on a thread pool: deletes the pods (unless a dry
    run) and posts an Event on each."""

    def __init__(
        self,
        *,
        delete: Callable[[Iterable[tuple[str, str, str]]], list[str]],
        emit: Callable[..., None],
        pool: Executor,
    ) -> None:
        self.delete = delete
        self.emit = emit
        self.pool = pool

    def __call__(self, restart: Restart) -> None:
        self.pool.submit(self._run, restart)

    def _run(self, restart: Restart) -> None:
        try:
            done = set() if restart.dry_run else set(self.delete(restart.pods))
        except Exception:
            logger.exception("restarting the pods of hung job %s failed", restart.job)
            done = set()
        for namespace, name, uid in restart.pods:
            ref = pod_ref(namespace, name, uid)
            if restart.dry_run:
                told = f"dry run: would restart the job's pods: {restart.message}"
                self.emit(ref, reason="HangDetected", message=told, warning=True)
            elif f"{namespace}/{name}" in done:
                told = f"deleted so its launcher restarts it: {restart.message}"
                self.emit(ref, reason="HangRestart", message=told, warning=True)
