"""Turn API objects (as JSON dicts) into the plain views the decisions read."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from gpuhealth.models import GpuModel, model_for_product
from pitcrew.api.errors import PitcrewError
from pitcrew.api.gpunode import AgentChecks, GPUNodeStatus
from pitcrew.api.policy import GPUHealthPolicySpec, RemediationAction
from pitcrew.api.vocabulary import (
    CHECKPOINT_ANNOTATION,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    PROBE_LABEL,
    PROGRESS_LOST_ANNOTATION,
    RESERVED_TAINT,
)
from pitcrew.core.in_place import restart_exit_code
from pitcrew.core.job_discovery import JobIdentity, identify, taint_value
from pitcrew.core.job_ledger import JobPod
from pitcrew.core.views import NodeView, PodView, PolicyView, Taint

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_time(value: Any) -> datetime.datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    try:
        parsed = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def own_job(pod: dict[str, Any], *, namespace: str) -> str:
    """The Job of Pitcrew's that runs ``pod`` (a probe, pair or reset Job), or empty.

    A pod is Pitcrew's only in the operator's ``namespace`` (where tenants create
    nothing) and controlled by a Job of the name its ``job-name`` label says. Labels
    alone prove nothing: anyone who may create a pod may label it
    ``pitcrew.dev/probe`` or ``job-name=<a probe's Job>``, and bind it to a cordoned
    node with ``spec.nodeName``; such a pod must neither pass nor fail a probe, nor
    show a reset that never ran."""
    meta = pod.get("metadata") or {}
    if not namespace or meta.get("namespace") != namespace:
        return ""
    labels = meta.get("labels") or {}
    named = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
    owners: list[dict[str, Any]] = meta.get("ownerReferences") or []
    controller = next((o for o in owners if o.get("controller")), {})
    if controller.get("kind") != "Job" or not named or controller.get("name") != named:
        return ""
    return str(named)


def pod_view(
    pod: dict[str, Any],
    checkpoints: Mapping[str, datetime.datetime] | None = None,
    *,
    slurmd: bool = False,
    namespace: str = "",
    seen: Mapping[str, datetime.datetime] | None = None,
    operator_pod: str = "",
) -> PodView:
    """``checkpoints``: each training job's last checkpoint (``namespace/job``) as its
    rank 0 reports it; a pod of the job checkpointed then, though only rank 0 says so.
    ``namespace``: the operator's, where its own Jobs' pods run (:func:`own_job`).
    ``seen``: when the operator saw each pod's ``pitcrew.dev/checkpoint-at`` change, by
    its own clock (the store's); without it, the annotation's time, the node's clock.
    ``operator_pod``: ``namespace/name`` of the pod the operator runs in, if any."""
    meta = pod.get("metadata", {})
    owners = meta.get("ownerReferences") or []
    controller = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    own = own_job(pod, namespace=namespace)
    phase = (pod.get("status") or {}).get("phase", "")
    disruption = next(
        (
            str(c.get("reason") or "DisruptionTarget")
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        "",
    )
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )
    job = identity.name if (identity := training_job(pod)) else ""
    return PodView(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        owner_kind=controller.get("kind", ""),
        mirror="kubernetes.io/config.mirror" in annotations,
        terminating=meta.get("deletionTimestamp") is not None,
        finished=phase in ("Succeeded", "Failed"),
        probe=bool(own) and PROBE_LABEL in labels,
        slurmd=slurmd,
        checkpoint_at=_latest(
            seen.get(object_key(pod))
            if seen is not None
            else parse_time(annotations.get(CHECKPOINT_ANNOTATION)),
            (checkpoints or {}).get(f"{meta.get('namespace', '')}/{job}") if job else None,
        ),
        job=job,
        job_name=own,
        succeeded=phase == "Succeeded",
        pending=phase == "Pending",
        ready=ready,
        disruption=disruption,
        grace_seconds=int((pod.get("spec") or {}).get("terminationGracePeriodSeconds") or 30),
        progress_lost=bool(job) and annotations.get(PROGRESS_LOST_ANNOTATION) == "true",
        operator=bool(operator_pod) and object_key(pod) == operator_pod,
        restarts_in_place=bool(job) and restart_exit_code(pod.get("spec") or {}) is not None,
    )


def _latest(*moments: datetime.datetime | None) -> datetime.datetime | None:
    return max((m for m in moments if m is not None), default=None)


def node_view(
    node: dict[str, Any],
    pods: Iterable[dict[str, Any]] = (),
    checkpoints: Mapping[str, datetime.datetime] | None = None,
    *,
    slurmd: str = "",
    namespace: str = "",
    seen: Mapping[str, datetime.datetime] | None = None,
    operator_pod: str = "",
) -> NodeView:
    """``slurmd``: the ``namespace/name`` of the pod that runs the node's slurmd;
    ``namespace``: the operator's, where its own Jobs' pods run (:func:`own_job`);
    ``operator_pod``: the pod the operator runs in (:func:`pod_view`)."""
    meta = node.get("metadata", {})
    spec = node.get("spec") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return NodeView(
        name=meta.get("name", ""),
        created=parse_time(meta.get("creationTimestamp")) or EPOCH,
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(
            Taint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
            for t in spec.get("taints") or []
        ),
        ready=ready,
        pods=tuple(
            pod_view(
                p,
                checkpoints,
                slurmd=slurmd == object_key(p),
                namespace=namespace,
                seen=seen,
                operator_pod=operator_pod,
            )
            for p in pods
        ),
        gpus=gpu_capacity(node),
        boot_id=str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or ""),
    )


def object_key(obj: dict[str, Any]) -> str:
    """A namespaced object's ``namespace/name``: how pods and budgets are keyed."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def gpu_capacity(node: dict[str, Any]) -> int:
    """The node's ``nvidia.com/gpu`` capacity: the one reading of how many GPUs a
    node has. 0 when it declares none (no device plugin yet) or garbage, never a
    guess: a probe or a reset that asks for GPUs the node does not show would
    wait forever or test the wrong count."""
    capacity = (node.get("status") or {}).get("capacity") or {}
    try:
        return max(0, int(capacity.get(GPU_RESOURCE) or 0))
    except (TypeError, ValueError):
        return 0


def gpu_model(node: dict[str, Any]) -> GpuModel | None:
    """The GPU model its ``nvidia.com/gpu.product`` label names, if gpuhealth knows it."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return model_for_product(labels.get(GPU_PRODUCT_LABEL, ""))


def pod_gpus(pod: dict[str, Any]) -> int:
    """GPUs a pod asks for: its containers' limits (or requests) summed."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU_RESOURCE) or (
            resources.get("requests") or {}
        ).get(GPU_RESOURCE)
        try:
            total += int(amount or 0)
        except (TypeError, ValueError):
            continue
    return total


def training_job(pod: dict[str, Any]) -> JobIdentity | None:
    """The training job a pod belongs to, by its launcher's labels: only pods that
    request GPUs are a training job's (a label on a web pod, or a tenant's thousand,
    is no job to account or to wait for), and none of Pitcrew's own (its probe and
    reset Jobs ask for GPUs too)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if pod_gpus(pod) <= 0 or PROBE_LABEL in labels:
        return None
    return identify(labels, meta.get("annotations") or {})


def job_pod(pod: dict[str, Any], *, gpus: int, peak: float | None, gone: bool) -> JobPod:
    """A training pod as the job ledger reads it, with the times that place an
    interruption exactly: when its containers last started, and when it stopped (the
    deletion request, which is the deletion timestamp less its grace period, or a
    container's last ``finishedAt``)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    started = [
        _instant(((c.get("state") or {}).get("running") or {}).get("startedAt")) for c in containers
    ]
    finished = [
        _instant(((c.get(kind) or {}).get("terminated") or {}).get("finishedAt"))
        for c in containers
        for kind in ("state", "lastState")
    ]
    stopped = [t for t in finished if t is not None]
    deleting = _instant(meta.get("deletionTimestamp"))
    if deleting is not None:
        grace = meta.get("deletionGracePeriodSeconds") or 0
        stopped.append(deleting - datetime.timedelta(seconds=int(grace)))
    running = status.get("phase") == "Running" and deleting is None and not gone
    return JobPod(
        name=str(meta.get("name", "")),
        running=running,
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        gpus=gpus,
        peak_flops_per_gpu=peak,
        uid=str(meta.get("uid", "")),
        created_at=_instant(meta.get("creationTimestamp")),
        restarts=sum(int(c.get("restartCount") or 0) for c in containers),
        started_at=max((t for t in started if t is not None), default=None),
        stopped_at=max(stopped, default=None),
        gone=gone,
    )


def _instant(value: Any) -> datetime.datetime | None:
    """A pod's timestamp as the middle of the second it names: the API writes these
    times in whole seconds, so the event happened within ``[t, t + 1 s)``, and the
    middle halves the worst error of the job ledger's placement."""
    parsed = parse_time(value)
    if parsed is None or parsed.microsecond:
        return parsed
    return parsed + datetime.timedelta(milliseconds=500)


class UnreadableStatusError(PitcrewError, ValueError):
    """A GPUNode status this operator cannot parse (a newer schema, a hand edit)."""


def termination_message(pod: dict[str, Any]) -> str:
    """What the pod's first container left in its termination message, if it ended."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated.get("message"):
            return str(terminated["message"])
    return ""


def gpunode_status(gpunode: dict[str, Any] | None) -> GPUNodeStatus:
    """The status of a GPUNode; an empty one for a GPUNode without status (new).

    A status that exists but does not parse raises :class:`UnreadableStatusError`:
    deciding such a node as if it were new would make it Pending and the next
    status write would erase its drain, its remediation and its lemon history.
    """
    if not gpunode or not gpunode.get("status"):
        return GPUNodeStatus()
    try:
        return GPUNodeStatus.model_validate(gpunode["status"])
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:5]
        )
        raise UnreadableStatusError(f"status does not parse: {problems}") from error


def published_checks(gpunode: dict[str, Any] | None) -> AgentChecks | None:
    """The check configuration a GPUNode's spec publishes to its agent; ``None`` when
    there is none yet, or it does not parse (the operator publishes it again)."""
    raw = ((gpunode or {}).get("spec") or {}).get("checks")
    try:
        return None if raw is None else AgentChecks.model_validate(raw)
    except ValidationError:
        return None


def pending_reset(gpunode: dict[str, Any] | None) -> str:
    """The key of the reset-gpu rung the operator recorded on this GPUNode and has not
    seen done (no evidence, no error yet), or empty: while there is one, the node's agent
    keeps its NVML handles closed so that ``nvidia-smi -r`` is not refused as in use.
    Read from the operator's own field (``status.remediation``), which no tenant writes."""
    rung = ((gpunode or {}).get("status") or {}).get("remediation") or {}
    if rung.get("action") != RemediationAction.RESET_GPU.value:
        return ""
    if rung.get("confirmed") or rung.get("error"):
        return ""
    return str(rung.get("reference") or "")


def policy_view(policy: dict[str, Any]) -> PolicyView:
    meta = policy.get("metadata", {})
    status = policy.get("status") or {}
    breaker = status.get("breaker") or {}
    return PolicyView(
        name=meta.get("name", ""),
        created=parse_time(meta.get("creationTimestamp")) or EPOCH,
        spec=GPUHealthPolicySpec.model_validate(policy.get("spec") or {}),
        breaker_open=bool(breaker.get("open")),
        breaker_since=parse_time(breaker.get("since")),
        cooldown_until=parse_time(status.get("cooldownUntil")),
    )


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics for matchLabels and matchExpressions."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and (not present or labels[key] not in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def reservation_job(pod: dict[str, Any]) -> str:
    """The training job of ``pod`` as a reservation names it (``pitcrew.dev/reserved``'s
    value, :func:`pitcrew.core.job_discovery.taint_value`); empty for any other pod."""
    identity = training_job(pod)
    if identity is None:
        return ""
    return taint_value((pod.get("metadata") or {}).get("namespace", ""), identity.name)


def waiting_pod_view(pod: dict[str, Any]) -> PodView:
    """A pod that waits for a node, as a reserved spare's or a spare's decision reads
    it: with the reservation it tolerates (``pitcrew.dev/reserved``'s value), if any,
    the GPUs it asks for and its ``nodeSelector``."""
    spec = pod.get("spec") or {}
    tolerates = next(
        (
            str(t.get("value") or "")
            for t in spec.get("tolerations") or []
            if t.get("key") == RESERVED_TAINT and t.get("operator") == "Equal"
        ),
        "",
    )
    selector = spec.get("nodeSelector") or {}
    return replace(
        pod_view(pod),
        tolerates=tolerates,
        gpus=pod_gpus(pod),
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
    )


def waits_for_capacity(pod: dict[str, Any]) -> bool:
    """A training job's pod that the scheduler found no node for: Pending on no node,
    its ``PodScheduled`` condition False for ``Unschedulable``, no node nominated for it
    (a preemption under way places it anyway), and made by a controller (a Job, a
    JobSet's Job, a training operator): a bare pod that names a job is no launcher's
    replacement to serve, and would take a spare from one that is."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if spec.get("nodeName") or status.get("nominatedNodeName") or meta.get("deletionTimestamp"):
        return False
    if status.get("phase", "Pending") != "Pending" or training_job(pod) is None:
        return False
    if not any(o.get("controller") for o in meta.get("ownerReferences") or []):
        return False
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )
