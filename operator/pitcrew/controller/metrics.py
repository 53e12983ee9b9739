"""The operator's Prometheus metrics, and how a decision turns into observations.

Every metric is defined here, so its name, labels and cardinality can be
reviewed in one place (docs/metrics.md lists them):

- ``pool`` is a GPUHealthPolicy name and ``phase`` one of eleven phases: a few
  dozen series per pool;
- ``reason`` is a lifecycle reason (a literal of ``pitcrew.core.lifecycle``) or
  the CamelCase name of the failing check that took the node out (gpuhealth's
  check names), never a message. Check names reach the operator in the report
  the node's agent writes, so a tampered agent could choose its own node's
  reason (at most 128 characters), never another node's (the admission policy):
  the series stay one per node and transition, bounded by the fleet;
- ``node`` appears only on the agent heartbeat gauge and on
  ``pitcrew_gpunode_info``: one series per node, bounded by the fleet (a node's
  info series is replaced when its phase or reason changes, never added to);
  pods never appear in a label;
- ``training_job`` names a training workload (``namespace/name``, from the
  ``pitcrew.dev/job`` label or its launcher's): one series per job and category,
  removed when the job's pods are gone, at most ``--max-jobs`` jobs. Not ``job``:
  that is the label Prometheus gives every series of a scrape, and one of the
  two would be renamed (or need ``honor_labels``).

Counters are fed by the shell after a decision has been carried out (a
transition that was not written did not happen); GPU-seconds and job time
are fed by the accountants on a timer.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from pitcrew.api.gpunode import GPUNodeStatus, Phase
from pitcrew.api.vocabulary import IN_SERVICE, MAINTENANCE_REASON, TAKEN_OUT

GPU_SECONDS = Counter(
    "pitcrew_gpu_seconds_total",
    "GPU-seconds spent in each phase; goodput over a window is a ratio of rates.",
    ["pool", "phase"],
)
NODES = Gauge("pitcrew_nodes", "Nodes by phase.", ["pool", "phase"])
OLDEST = Gauge(
    "pitcrew_phase_oldest_age_seconds",
    "How long the node longest in each phase has been in it (stuck drains, repairs).",
    ["pool", "phase"],
)
GPUS = Gauge("pitcrew_gpus", "GPUs by the phase of their node.", ["pool", "phase"])
TRANSITIONS = Counter(
    "pitcrew_phase_transitions_total",
    "Node phase transitions.",
    ["pool", "from_phase", "to_phase", "reason"],
)
REMEDIATIONS = Counter(
    "pitcrew_remediations_total",
    "Remediation rungs by action and result (started, succeeded, failed).",
    ["pool", "action", "result"],
)
REMEDIATION_SECONDS = Histogram(
    "pitcrew_remediation_duration_seconds",
    "From a rung's start to the node leaving Remediating.",
    ["pool", "action"],
    buckets=(30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400),
)
TIME_TO_REPAIR_SECONDS = Histogram(
    "pitcrew_time_to_repair_seconds",
    "From a node leaving service to the repair that fixed it being confirmed (its "
    "revalidation follows), by the fault class and the rung that fixed it.",
    ["pool", "fault_class", "action"],
    buckets=(60, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400),
)
POOL_INTERRUPTIONS = Counter(
    "pitcrew_pool_interruptions_total",
    "Training job interruptions by the pool of the job's nodes and cause; the mean "
    "time between interruptions is job time over this (docs/metrics.md).",
    ["pool", "cause"],
)
DETECTION_SECONDS = Histogram(
    "pitcrew_detection_to_quarantine_seconds",
    "From the health report that carried a fault to the node's quarantine.",
    ["pool"],
    buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120),
)
DRAIN_SECONDS = Histogram(
    "pitcrew_drain_duration_seconds",
    "From the start of a drain to the last pod gone (or the drain given up).",
    ["pool"],
    buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 3600),
)
EVICTIONS = Counter(
    "pitcrew_evictions_total",
    "Evictions by result: evicted, blocked (a PodDisruptionBudget refused the request), "
    "failed, waiting (not asked for: its budget allows no disruption now, or more than one "
    "budget covers the pod, which the eviction API always refuses).",
    ["pool", "result"],
)
BREAKER_OPEN = Gauge(
    "pitcrew_circuit_breaker_open", "1 while the policy's circuit breaker refuses nodes.", ["pool"]
)
GOODPUT_TARGET = Gauge(
    "pitcrew_goodput_target_ratio",
    "The fleet goodput the policy holds the pool to (spec.goodput.target).",
    ["pool"],
)
VERIFICATIONS = Counter(
    "pitcrew_verifications_total",
    "Periodic verifications of idle nodes by result (Passed, Failed, Preempted, Inconclusive).",
    ["pool", "result"],
)
VERIFICATION_GPU_SECONDS = Counter(
    "pitcrew_verification_gpu_seconds_total",
    "GPU-seconds held by periodic verification probes, from start to outcome; its rate "
    "over the rate of pitcrew_gpu_seconds_total is the share of GPU time spent verifying.",
    ["pool"],
)
LEADER = Gauge(
    "pitcrew_leader",
    "1 in the operator replica that holds the cluster shard's Lease (its ValidationRuns, "
    "the fleet's GPU-time and job-time series).",
)
POOL_LEADER = Gauge(
    "pitcrew_pool_leader",
    "1 for each pool whose Lease this operator replica holds: it decides and acts for "
    "that pool's nodes.",
    ["pool"],
)
DECISIONS = Counter(
    "pitcrew_decisions_total",
    "Lifecycle decisions, by whether they changed the node (acted) or not (unchanged); "
    "with process CPU seconds, the operator's cost per decision.",
    ["outcome"],
)
RECONCILE_ERRORS = Counter(
    "pitcrew_reconcile_errors_total", "Decisions or rounds that failed and were retried."
)
HEARTBEAT = Gauge(
    "pitcrew_agent_last_heartbeat_timestamp_seconds",
    "Unix time of the last report from the node's agent.",
    ["node"],
)
NODE_INFO = Gauge(
    "pitcrew_gpunode_info",
    "1 for each GPU node under one policy, with its phase and why it is there "
    "(status.reason): who is out of service and why.",
    ["node", "pool", "phase", "reason"],
)
JOB_SECONDS = Counter(
    "pitcrew_job_seconds_total",
    "Wall time of a training job by category: productive, wasted (progress lost at "
    "an interruption), recovery (after a node fault until it runs again), waiting.",
    ["training_job", "category"],
)
JOB_INTERRUPTIONS = Counter(
    "pitcrew_job_interruptions_total", "Job interruptions by cause.", ["training_job", "cause"]
)
JOB_HANGS = Counter(
    "pitcrew_job_hangs_total",
    "Training jobs found hung (pods running, no rank stepping) and restarted, by the "
    "evidence the hang was blamed on (pitcrew.core.hangs.Blame).",
    ["reason"],
)
RESTARTS_IN_PLACE = Counter(
    "pitcrew_restarts_in_place_requested_total",
    "Pods of training jobs asked to restart in place (pitcrew.dev/restart-requested) "
    "because Pitcrew took another of the job's nodes out.",
)
JOB_MFU = Gauge(
    "pitcrew_job_mfu_ratio",
    "Model FLOPs utilisation: achieved FLOP/s over the peak dense bf16 FLOP/s of its GPUs.",
    ["training_job"],
)
JOB_GPUS = Gauge("pitcrew_job_gpus", "GPUs requested by the job's running pods.", ["training_job"])
JOBS_FOLDED = Gauge(
    "pitcrew_jobs_folded",
    'Training jobs past --max-jobs, counted together as training_job="other" in the '
    "pitcrew_job_* series.",
)


def record_decision(
    *, pool: str, before: GPUNodeStatus, after: GPUNodeStatus, now: datetime.datetime
) -> None:
    """Count what changed between the status before a decision and the one written."""
    if after.phase is not before.phase:
        TRANSITIONS.labels(pool, before.phase, after.phase, after.reason).inc()
        reported = after.checks.report_time
        detected = after.phase in TAKEN_OUT and after.reason != MAINTENANCE_REASON
        if before.phase in IN_SERVICE and detected and reported is not None:
            DETECTION_SECONDS.labels(pool).observe(max(0.0, (now - reported).total_seconds()))
        if before.phase is Phase.DRAINING and before.drain is not None:
            DRAIN_SECONDS.labels(pool).observe((now - before.drain.started_at).total_seconds())
    _record_verification(pool=pool, before=before, after=after, now=now)
    old, new = before.remediation, after.remediation
    if new is not None and (old is None or old.reference != new.reference):
        REMEDIATIONS.labels(pool, new.action, "started").inc()
    if old is not None and (new is None or old.reference != new.reference):
        succeeded = after.phase is Phase.VALIDATING or after.phase is Phase.HEALTHY
        REMEDIATIONS.labels(pool, old.action, "succeeded" if succeeded else "failed").inc()
        REMEDIATION_SECONDS.labels(pool, old.action).observe((now - old.started_at).total_seconds())
        if succeeded:
            left = _left_service(before) or old.started_at
            TIME_TO_REPAIR_SECONDS.labels(pool, old.fault_class, old.action).observe(
                max(0.0, (now - left).total_seconds())
            )


def _record_verification(
    *, pool: str, before: GPUNodeStatus, after: GPUNodeStatus, now: datetime.datetime
) -> None:
    """A verification ends when the status stops naming its Job: with a result (judged)
    or without (stopped because the node left service)."""
    old, new = before.verification, after.verification
    if old is None or not old.job or (new is not None and new.job == old.job):
        return
    if old.started_at is not None:
        held = max(0.0, (now - old.started_at).total_seconds())
        VERIFICATION_GPU_SECONDS.labels(pool).inc(held * after.gpu_count)
    if new is not None and new.last_result is not None and new.last_time != old.last_time:
        VERIFICATIONS.labels(pool, new.last_result).inc()


def _left_service(status: GPUNodeStatus) -> datetime.datetime | None:
    """When the node last left service, from its history."""
    for transition in reversed(status.history):
        if transition.from_phase in IN_SERVICE and transition.to_phase not in IN_SERVICE:
            return transition.time
    return None


FLEET: tuple[Counter | Gauge, ...] = (
    GPU_SECONDS,
    NODES,
    GPUS,
    OLDEST,
    HEARTBEAT,
    NODE_INFO,
    POOL_INTERRUPTIONS,
    JOB_SECONDS,
    JOB_INTERRUPTIONS,
    JOB_GPUS,
    JOB_MFU,
    JOBS_FOLDED,
)
"""The series the accountant feeds from the whole cache on a timer. Every replica
keeps them (its ledgers feed the goodput in the status of the pools it leads), and
only the cluster shard's holder serves them (:func:`serve`): summed over the
replicas, they would count every GPU-second once per replica."""


class Served(Collector):
    """The process's metrics, the :data:`FLEET` series left out while ``fleet`` says
    another replica serves them."""

    def __init__(self, fleet: Callable[[], bool]) -> None:
        self.fleet = fleet
        self.names = {family.name for metric in FLEET for family in metric.describe()}

    def collect(self) -> Iterable[Any]:
        serve_fleet = self.fleet()
        for family in REGISTRY.collect():
            if serve_fleet or family.name not in self.names:
                yield family


def serve(port: int, *, fleet: Callable[[], bool]) -> None:
    """Serve the metrics on ``port``, the fleet's series while ``fleet()``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Served(fleet))
    start_http_server(port, registry=registry)
