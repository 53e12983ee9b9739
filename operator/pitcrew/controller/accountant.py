"""The timer that turns the operator's cache into GPU-time and job-time metrics.

Every few seconds it reads the store (no API calls): each node's phase, its
transitions and GPU count go to the :class:`~pitcrew.core.fleet_ledger.FleetLedger`
(which splits the time at the transitions, so the tick's length is no error), each
training job's pods, their nodes and rank 0's progress annotation to a
:class:`~pitcrew.core.job_ledger.JobLedger`; what the ledgers return is added to
the Prometheus counters. The same fleet ledger answers the policy status's
goodput over each of the policy's windows. The same jobs are judged for hangs
(:mod:`~pitcrew.controller.hangs`).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from pitcrew.api.gpunode import Phase
from pitcrew.api.meta import Duration
from pitcrew.api.policy import StragglerSpec
from pitcrew.api.vocabulary import (
    OUT_OF_SERVICE,
    PROGRESS_ANNOTATION,
)
from pitcrew.client.progress import MalformedProgressError, parse
from pitcrew.controller import metrics
from pitcrew.controller.hangs import HangWatch
from pitcrew.controller.store import Store
from pitcrew.core import job_tracking
from pitcrew.core.convert import EPOCH, gpu_capacity, gpu_model, job_pod, pod_gpus, training_job
from pitcrew.core.fleet_ledger import FleetLedger, NodeTime
from pitcrew.core.job_discovery import JobIdentity
from pitcrew.core.job_ledger import (
    CATEGORIES,
    Cause,
    JobLedger,
    JobObservation,
    JobPod,
    Progress,
)
from pitcrew.core.job_size import Owner, owner
from pitcrew.core.stragglers import Streaks

logger = logging.getLogger(__name__)
RECENTLY_OUT = datetime.timedelta(minutes=10)
"""A node taken out of service within this long still marks its jobs' lost pods as lost
to a node fault, though it may be back in service by the tick that sees the loss."""


class Flag(Protocol):
    """Where a pod's unreadable annotation is reported (an Event on the pod)."""

    def __call__(self, pod: dict[str, Any], *, reason: str, message: str) -> None: ...


class Accountant:
    def __init__(
        self,
        store: Store,
        *,
        now: datetime.datetime,
        max_jobs: int = 200,
        flag: Flag | None = None,
        wake: Callable[[Iterable[str]], None] | None = None,
        sizes: Callable[[Owner], int | None] | None = None,
        hangs: HangWatch | None = None,
    ) -> None:
        self.store = store
        self.hangs = hangs
        """Judges the jobs for hangs each tick (:mod:`~pitcrew.controller.hangs`)."""
        self.sizes = sizes
        """A job's size as its launcher's object declares it (:mod:`~pitcrew.controller.job_sizes`);
        None: sized by its pods' labels, else the most pods seen."""
        self.flag = flag
        self.wake = wake
        """Queues nodes for a decision: those a straggler verdict or a job's checkpoint
        concerns (the round loop's ``mark``)."""
        self.streaks = Streaks()
        self.flagged: set[tuple[str, int]] = set()
        """(pod UID, hash of the value) already reported: one Event per bad value, not
        one every tick."""
        self.fleet = FleetLedger(last=now)
        self.jobs: dict[str, JobLedger] = {}
        self.max_jobs = max_jobs
        self.tracked: frozenset[str] = frozenset()
        """Jobs with series of their own (:mod:`pitcrew.core.job_tracking`)."""
        self._gauges: set[tuple[str, Phase]] = set()
        self._heartbeats: set[str] = set()
        self._shown: dict[str, tuple[str, Phase, str]] = {}
        """Each node's ``pitcrew_gpunode_info`` labels as last set: pool, phase, reason."""
        self.last = now
        """The previous tick: a job first seen now is counted from its creation, if later."""
        self.reported: dict[str, datetime.datetime | None] = {}
        """Each job's checkpoint time as its report last said it (None: none yet), by
        the job's clock: only compared with itself, to see a new checkpoint."""

    def tick(self, now: datetime.datetime) -> None:
        out_of_service, recently_out = self._fleet(now)
        self._jobs(now, out_of_service, recently_out)
        self.last = now

    def goodput(
        self, pool: str, windows: Sequence[Duration], now: datetime.datetime
    ) -> list[dict[str, Any]]:
        """The pool's fleet goodput over each window, in the policy's order."""
        found = []
        for window in windows:
            ratio = self.fleet.goodput(pool, window=window, now=now)
            entry: dict[str, Any] = {"window": str(window)}
            if ratio is not None:
                # Three decimals (0.1 %): finer would rewrite the policy status every tick.
                entry["ratio"] = round(ratio, 3)
            found.append(entry)
        return found

    def _fleet(self, now: datetime.datetime) -> tuple[frozenset[str], frozenset[str]]:
        """Account GPU time; returns the nodes out of service, and those taken out
        lately (some of them back in service already)."""
        times: list[NodeTime] = []
        out: set[str] = set()
        recent: set[str] = set()
        beating: set[str] = set()
        shown: dict[str, tuple[str, Phase, str]] = {}
        for name, node in self.store.nodes.items():
            pools = self.store.policies_of(name)
            if len(pools) != 1:
                continue
            summary = self.store.summary(name)
            shown[name] = (pools[0], summary.phase, summary.reason)
            history = summary.history
            times.append(
                NodeTime(
                    pools[0],
                    summary.phase,
                    gpu_capacity(node),
                    summary.since,
                    name=name,
                    transitions=history,
                )
            )
            if summary.phase in OUT_OF_SERVICE:
                out.add(name)
            if any(t.to_phase in OUT_OF_SERVICE and t.time > now - RECENTLY_OUT for t in history):
                recent.add(name)
            if summary.heartbeat is not None:
                metrics.HEARTBEAT.labels(name).set(summary.heartbeat.timestamp())
                beating.add(name)
        for gone in self._heartbeats - beating:
            # A deleted node's series must go, or its heartbeat alert fires for ever.
            metrics.HEARTBEAT.remove(gone)
        self._heartbeats = beating
        self._show(shown)
        for (pool, phase), seconds in self.fleet.tick(times, now).items():
            metrics.GPU_SECONDS.labels(pool, phase).inc(seconds)
        counts: dict[tuple[str, Phase], tuple[int, int, float]] = {}
        for t in times:
            nodes, gpus, oldest = counts.get((t.pool, t.phase), (0, 0, 0.0))
            age = (now - t.since).total_seconds() if t.since else 0.0
            counts[(t.pool, t.phase)] = (nodes + 1, gpus + t.gpus, max(oldest, age))
        for key in self._gauges - set(counts):
            for gauge in (metrics.NODES, metrics.GPUS, metrics.OLDEST):
                gauge.labels(*key).set(0)
        for key, (nodes, gpus, oldest) in counts.items():
            metrics.NODES.labels(*key).set(nodes)
            metrics.GPUS.labels(*key).set(gpus)
            metrics.OLDEST.labels(*key).set(oldest)
        self._gauges |= set(counts)
        return frozenset(out), frozenset(recent | out)

    def _show(self, shown: dict[str, tuple[str, Phase, str]]) -> None:
        """``pitcrew_gpunode_info``: one series per node, replaced when its pool, phase
        or reason changes and removed with the node; only changes touch the gauge."""
        for name, labels in self._shown.items():
            if shown.get(name) != labels:
                metrics.NODE_INFO.remove(name, *labels)
        for name, labels in shown.items():
            if self._shown.get(name) != labels:
                metrics.NODE_INFO.labels(name, *labels).set(1)
        self._shown = shown

    def _grouped(self) -> dict[str, list[tuple[dict[str, Any], bool]]]:
        """Each training job's pods (``namespace/name``), with whether each is gone."""
        grouped: dict[str, list[tuple[dict[str, Any], bool]]] = {}
        departed = self.store.take_departed()
        for pod, gone in [
            *((p, False) for p in self.store.pods.values()),
            *((p, True) for p in departed),
        ]:
            identity = training_job(pod)
            if identity is not None:
                namespace = (pod.get("metadata") or {}).get("namespace", "")
                grouped.setdefault(f"{namespace}/{identity.name}", []).append((pod, gone))
        return grouped

    def _observe(
        self, pods: list[tuple[dict[str, Any], bool]], out: frozenset[str], recent: frozenset[str]
    ) -> JobObservation:
        members: list[JobPod] = []
        reports: list[Progress] = []
        size: int | None = None
        for pod, gone in pods:
            node = (pod.get("spec") or {}).get("nodeName") or ""
            model = gpu_model(self.store.nodes.get(node) or {})
            peak = model.peak_bf16_tflops * 1e12 if model else None
            members.append(job_pod(pod, gpus=pod_gpus(pod), peak=peak, gone=gone))
            # Every report, also from a pod already gone (rank 0's last words).
            report = self._progress(pod)
            if report is not None:
                reports.append(report)
            identity = training_job(pod)
            if identity is not None and identity.size is not None:
                size = identity.size
            elif identity is not None and size is None and self.sizes is not None and not gone:
                size = self._declared(identity, pod)
        present = [p for p, gone in pods if not gone]
        finished = bool(present) and all(
            (p.get("status") or {}).get("phase") == "Succeeded" for p in present
        )
        progress = max(reports, key=lambda r: r.time, default=None)
        return JobObservation(
            pods=tuple(members),
            progress=progress,
            reports=tuple(r for r in reports if r is not progress),
            out_of_service=out,
            recently_out=recent,
            size=size,
            finished=finished,
        )

    def _declared(self, identity: JobIdentity, pod: dict[str, Any]) -> int | None:
        """The size the job's launcher object declares, as last read (or None)."""
        meta = pod.get("metadata") or {}
        found = owner(
            identity,
            str(meta.get("namespace", "")),
            meta.get("labels") or {},
            list(meta.get("ownerReferences") or []),
        )
        return self.sizes(found) if found is not None and self.sizes is not None else None

    def _progress(self, pod: dict[str, Any]) -> Progress | None:
        """Rank 0's report, or None; a malformed one is ignored and flagged once."""
        meta = pod.get("metadata") or {}
        text = (meta.get("annotations") or {}).get(PROGRESS_ANNOTATION)
        if not text:
            return None
        try:
            return parse(str(text))
        except MalformedProgressError as error:
            key = (str(meta.get("uid", "")), hash(text))
            if key not in self.flagged:
                self.flagged.add(key)
                logger.warning("pod %s/%s: %s", meta.get("namespace"), meta.get("name"), error)
                if self.flag is not None:
                    self.flag(pod, reason="MalformedProgress", message=f"ignored: {error}")
            return None

    def _jobs(self, now: datetime.datetime, out: frozenset[str], recent: frozenset[str]) -> None:
        grouped = self._grouped()
        observations = {
            job: self._observe(pods, out, recent)
            for job, pods in grouped.items()
            if any(not gone for _, gone in pods)  # only departed pods: the job is over
        }
        for job in set(self.jobs) - set(observations):  # every pod gone: the job is over
            self.jobs.pop(job, None)
        self._protect(observations, now)
        self._hung(grouped, observations, now)
        if self.flagged:
            live = {str((p.get("metadata") or {}).get("uid", "")) for p in self.store.pods.values()}
            self.flagged = {key for key in self.flagged if key[0] in live}
        sizes = {
            job: sum(p.gpus for p in observation.pods if not p.gone)
            for job, observation in observations.items()
        }
        tracked = job_tracking.tracked(self.tracked, sizes, limit=self.max_jobs)
        for job in self.tracked - tracked:  # over, or displaced into "other"
            self._forget(job)
        self.tracked = tracked
        other_gpus = 0
        for job, observation in observations.items():
            own = job in tracked
            label = job if own else job_tracking.OTHER
            ledger = self.jobs.setdefault(job, JobLedger(last=self.last))
            tick = ledger.tick(observation, now)
            for category, seconds in tick.seconds.items():
                metrics.JOB_SECONDS.labels(label, category).inc(seconds)
            for cause in tick.interruptions:
                logger.info(
                    "job %s interrupted (%s); this tick: %s",
                    job,
                    cause,
                    ", ".join(f"{k} {v:.2f}s" for k, v in sorted(tick.seconds.items())),
                )
                metrics.JOB_INTERRUPTIONS.labels(label, cause).inc()
                pool = self._pool_of(observation)
                if pool:
                    metrics.POOL_INTERRUPTIONS.labels(pool, cause).inc()
            if not own:
                other_gpus += tick.gpus
                continue
            metrics.JOB_GPUS.labels(job).set(tick.gpus)
            if tick.mfu is not None:
                metrics.JOB_MFU.labels(job).set(tick.mfu)
        folded = len(observations) - len(tracked)
        metrics.JOBS_FOLDED.set(folded)
        if folded:
            metrics.JOB_GPUS.labels(job_tracking.OTHER).set(other_gpus)
        else:
            with contextlib.suppress(KeyError):
                metrics.JOB_GPUS.remove(job_tracking.OTHER)

    def _protect(self, observations: dict[str, JobObservation], now: datetime.datetime) -> None:
        """What the jobs' reports tell the lifecycle: each job's last checkpoint (a
        Suspect node drains after it) and which nodes straggle.

        A checkpoint is dated by when this operator first saw the report of it, by its
        own clock: the time in the report is the node's, and a node clock ahead of the
        operator's made a checkpoint from before the node was taken out look newer, so
        its drain began before the job's next checkpoint (the work since the last one
        lost). A checkpoint already there when the job is first seen (after a restart)
        is dated :data:`~pitcrew.core.convert.EPOCH`: before any take-out, so a Suspect
        node waits for the next one, at most ``checkpointMaxDelay``."""
        judged: dict[str, StragglerSpec] = {}
        woken: set[str] = set()
        for job, observation in observations.items():
            nodes = {p.node for p in observation.pods if p.running and not p.gone and p.node}
            own = {node: spec for node in nodes if (spec := self._straggler_spec(node))}
            judged.update(own)
            self.streaks.observe(job, observation.progress, own)
            saved = observation.progress.checkpoint_time if observation.progress else None
            known = job in self.reported
            if saved is not None and self.reported.get(job) != saved:
                self.reported[job] = saved
                self.store.job_checkpoints[job] = now if known else EPOCH
                # Only a Suspect node waits for a checkpoint: a thousand-node job's
                # checkpoint must not queue a thousand decisions that change nothing.
                woken |= {n for n in nodes if self.store.summary(n).phase is Phase.SUSPECT}
            elif not known:
                self.reported[job] = saved
        self.streaks.keep(set(observations))
        for job in set(self.store.job_checkpoints) - set(observations):
            del self.store.job_checkpoints[job]
        for job in set(self.reported) - set(observations):
            del self.reported[job]
        stragglers = self.streaks.stragglers(judged)
        changed = set(stragglers.items()) ^ set(self.store.stragglers.items())
        for node, why in stragglers.items():
            if node not in self.store.stragglers:
                logger.info("%s: %s", node, why)
        self.store.stragglers = stragglers
        woken |= {node for node, _ in changed}
        if woken and self.wake is not None:
            self.wake(sorted(woken))

    def _hung(
        self,
        grouped: dict[str, list[tuple[dict[str, Any], bool]]],
        observations: dict[str, JobObservation],
        now: datetime.datetime,
    ) -> None:
        """Judge the live jobs for hangs; decide again the nodes whose verdict changed."""
        if self.hangs is None:
            return
        present = {job: [p for p, gone in grouped[job] if not gone] for job in observations}
        pools = {job: self._pool_of(o) for job, o in observations.items()}
        woken = self.hangs.tick(present, pools, now)
        if woken and self.wake is not None:
            self.wake(sorted(woken))

    def _straggler_spec(self, node: str) -> StragglerSpec | None:
        """The straggler setting of a node in service under exactly one policy."""
        pools = self.store.policies_of(node)
        if len(pools) != 1 or self.store.summary(node).phase is not Phase.HEALTHY:
            return None
        policy = self.store.policy(pools[0])
        return policy.spec.stragglers if policy and policy.spec.stragglers.enabled else None

    def _pool_of(self, observation: JobObservation) -> str:
        """The pool most of the job's pods run in (a job rarely spans two)."""
        pools = Counter(
            pools[0]
            for pod in observation.pods
            if len(pools := self.store.policies_of(pod.node)) == 1
        )
        return pools.most_common(1)[0][0] if pools else ""

    def _forget(self, job: str) -> None:
        """Drop a job's own series (its ledger goes when its pods do)."""
        for category in CATEGORIES:
            with contextlib.suppress(KeyError):
                metrics.JOB_SECONDS.remove(job, category)
        for cause in Cause:
            with contextlib.suppress(KeyError):
                metrics.JOB_INTERRUPTIONS.remove(job, cause)
        for gauge in (metrics.JOB_MFU, metrics.JOB_GPUS):
            with contextlib.suppress(KeyError):
                gauge.remove(job)
