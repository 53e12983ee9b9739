"""Builders for lifecycle unit tests: nodes, reports, policies, fleets as plain data."""

from __future__ import annotations

import datetime
from typing import Any

from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction
from pitcrew.api.gpunode import AgentChecks, ChecksStatus, GPUNodeStatus, Phase
from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.api.vocabulary import CORDONED_BY, CORDONED_BY_VALUE
from pitcrew.core.agent_config import agent_checks
from pitcrew.core.views import FleetView, NodeState, NodeView, PodView, PolicyView, Taint

T0 = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
POLICY_CREATED = T0 - datetime.timedelta(days=30)
SELECTOR = {"matchLabels": {"nvidia.com/gpu.present": "true"}}
PROBE_JOB = "pitcrew-probe-gpu-node-0001-1"


def policy(**spec: Any) -> PolicyView:
    return PolicyView(
        name="fleet",
        created=POLICY_CREATED,
        spec=GPUHealthPolicySpec.model_validate({"nodeSelector": SELECTOR, **spec}),
    )


def finding(
    fault_class: FaultClass,
    *,
    name: str = "xid",
    gpu: int = 3,
    action: RecommendedAction = RecommendedAction.RESET_GPU,
) -> CheckResult:
    return CheckResult(
        name=name,
        status=CheckStatus.FAIL,
        gpu=gpu,
        fault_class=fault_class,
        action=action,
        message=f"{name} {fault_class}",
    )


def report(
    *results: CheckResult, at: datetime.datetime = T0, suite: str = "passive"
) -> ChecksStatus:
    passing = CheckResult(name="gpu-count", status=CheckStatus.PASS)
    return ChecksStatus(report_time=at, backend="sim", suite=suite, results=[passing, *results])


def status(
    phase: Phase = Phase.HEALTHY,
    *,
    since: datetime.datetime = T0,
    checks: ChecksStatus | None = None,
    **fields: Any,
) -> GPUNodeStatus:
    probe = fields.get("probe")
    if probe is not None:
        # A probe report comes from the probe Job the validation started.
        fields["probe"] = probe if probe.job else probe.model_copy(update={"job": PROBE_JOB})
        fields.setdefault("probe_job", fields["probe"].job)
    return GPUNodeStatus(
        phase=phase,
        phase_since=since,
        checks=checks or report(),
        last_heartbeat=checks.report_time if checks else T0,
        **fields,
    )


def node(
    name: str = "gpu-node-0001",
    *,
    created: datetime.datetime = POLICY_CREATED - datetime.timedelta(days=1),
    pods: tuple[PodView, ...] = (),
    cordoned_by: str | None = None,
    taints: tuple[Taint, ...] = (),
    labels: dict[str, str] | None = None,
) -> NodeView:
    annotations = {CORDONED_BY: cordoned_by} if cordoned_by else {}
    return NodeView(
        name=name,
        created=created,
        labels=labels or {},
        annotations=annotations,
        unschedulable=cordoned_by is not None,
        taints=taints,
        pods=pods,
    )


def pitcrew_cordoned(view: NodeView, *taint_keys: str) -> NodeView:
    return NodeView(
        name=view.name,
        created=view.created,
        labels=view.labels,
        annotations={**view.annotations, CORDONED_BY: CORDONED_BY_VALUE},
        unschedulable=True,
        taints=tuple(Taint(k) for k in taint_keys),
        pods=view.pods,
    )


def pod(
    name: str,
    *,
    checkpoint_at: datetime.datetime | None = None,
    owner: str = "Job",
    job: str = "llm",
) -> PodView:
    """A pod of training job ``job`` (``job=""``: a pod that is not training)."""
    return PodView(
        namespace="train", name=name, owner_kind=owner, checkpoint_at=checkpoint_at, job=job
    )


def fleet(total: int = 10, spares: tuple[str, ...] = (), **phases: int) -> FleetView:
    counts = {Phase(k.capitalize()): v for k, v in phases.items()}
    counts.setdefault(Phase.HEALTHY, total - sum(counts.values()))
    return FleetView(total=total, phases=counts, spares=spares)


def state(
    view: NodeView, node_status: GPUNodeStatus, *, checks: AgentChecks | None = None
) -> NodeState:
    """The node as decided; its agent already runs the default policy's checks unless
    ``checks`` says what it runs."""
    return NodeState(node=view, status=node_status, checks=checks or agent_checks(policy(), view))
