"""GPUNode: Pitcrew's record of one GPU node, same name as the Node.

The status is the operator's memory. Phase, the running remediation (action,
attempt, start) and the drain in progress live here, so a restarted or newly
elected operator resumes mid-drain from the object alone. Two writers share
the status by server-side apply, each owning its own fields: the node agent
(field manager ``pitcrew-agent``) owns ``checks``, ``gpus``, ``gpuCount``,
``healthyGpus`` and ``lastHeartbeat``; probe pods (``pitcrew-probe``) own
``probe``; the operator's pre-pull loop (``pitcrew-pre-pull``) owns ``images``; the
operator's rounds (``pitcrew-operator``) own everything else.

The spec carries what the agent must run (``spec.checks``): the operator
resolves the node's policy into it, the agent watches its own GPUNode and
applies a change at its next sweep.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import ConfigDict, Field

from gpuhealth.report import CheckResult, FaultClass, GpuIdentity
from pitcrew.api.meta import (
    ApiModel,
    Condition,
    Duration,
    Resource,
    Timestamp,
    cel,
    conditions_field,
    validations,
)
from pitcrew.api.policy import RemediationAction

HISTORY_LIMIT = 50


class Phase(StrEnum):
    PENDING = "Pending"
    VALIDATING = "Validating"
    HEALTHY = "Healthy"
    SUSPECT = "Suspect"
    QUARANTINED = "Quarantined"
    DRAINING = "Draining"
    REMEDIATING = "Remediating"
    MAINTENANCE = "Maintenance"
    """Drained for a maintenance window; revalidated when it ends."""
    RETIRED = "Retired"
    SPARE = "Spare"
    EXCLUDED = "Excluded"


class AgentChecks(ApiModel):
    """The check configuration the node's agent runs, resolved by the operator from the
    node's policy (so an agent needs no flags and no read access to policies)."""

    policy: str = Field(default="", max_length=253, description="The policy it comes from.")
    interval: Duration = Field(description="How often the agent runs the passive checks.")
    heartbeat: Duration = Field(description="Longest time between two agent status writes.")
    expected_gpus: int | None = Field(
        default=None, ge=1, le=64, description="GPUs the node must show."
    )
    disabled: list[str] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"items": {"type": "string", "maxLength": 63}},
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict, json_schema_extra={"maxProperties": 64}
    )


class GPUNodeSpec(ApiModel):
    node_name: str = Field(
        min_length=1,
        max_length=253,
        description="The Node this record is about (equals metadata.name).",
    )
    checks: AgentChecks | None = Field(
        default=None,
        description="Written by the operator from the node's policy; the agent runs it.",
    )


class GpuStatus(GpuIdentity):
    """Per-GPU summary written by the agent."""

    healthy: bool = True
    temperature_c: float | None = None
    power_w: float | None = None


class ChecksStatus(ApiModel):
    """The latest gpuhealth report, as the agent last wrote it."""

    report_time: Timestamp | None = None
    backend: str = Field(default="", max_length=16)
    suite: str = Field(default="", max_length=16)
    results: list[CheckResult] = Field(default_factory=list, max_length=1024)
    repair: str = Field(
        default="",
        max_length=253,
        description="The confirmed repair (its key) the agent had applied when it wrote "
        "this report: a rung is judged by reports that carry its key, never by clocks.",
    )
    job: str = Field(
        default="",
        max_length=63,
        description="The probe Job that wrote this report (probe reports only): validation "
        "counts a report by the Job's name, never by comparing the node's clock with the "
        "operator's.",
    )
    released: str = Field(
        default="",
        max_length=253,
        description="The reset-gpu rung (its key) for which the agent has closed its NVML "
        "handles and paused its checks, so that nvidia-smi -r is not refused as in use; "
        "the reset Job is created once this names the rung.",
    )


class WatchedFinding(ApiModel):
    """An application or watch finding the operator is watching: on its own it takes
    nothing out of service, but one that persists escalates to ``degraded``."""

    check: str = Field(max_length=64)
    gpu: int | None = None
    since: Timestamp
    escalated: bool = False


class RemediationStatus(ApiModel):
    action: RemediationAction
    fault_class: FaultClass
    step: int = Field(ge=0, description="Index of the rung in the ladder.")
    attempt: int = Field(ge=1)
    started_at: Timestamp
    boot_id: str = Field(
        default="", max_length=64, description="The Node's boot ID when the rung started."
    )
    confirmed: str = Field(
        default="",
        max_length=256,
        description="The evidence that the repair happened (a new boot ID, the reset Job's "
        "success); empty until there is some.",
    )
    reference: str = Field(
        default="", max_length=253, description="Job name, webhook idempotency key or BMC task."
    )
    error: str = Field(
        default="", max_length=1024, description="Why the rung could not start; escalates at once."
    )
    awaiting_release: bool = Field(
        default=False,
        description="A reset-gpu rung waits for the agent to close its NVML handles "
        "(checks.released) before its Job is created, for a bounded time.",
    )


class RepairUnderTest(ApiModel):
    """The rung whose repair a validation is judging. Should the validation fail, the
    repair did not hold: the ladder goes on from the next rung, not from its first
    (a reset that leaves a GPU slow is not tried three times before a reboot)."""

    action: RemediationAction
    fault_class: FaultClass
    step: int = Field(ge=0, description="Index of the rung in the ladder.")


class DrainStatus(ApiModel):
    started_at: Timestamp
    pending: list[str] = Field(
        default_factory=list, max_length=1024, description="namespace/name of pods still to evict."
    )
    evicted: int = 0
    blocked_by: str = Field(
        default="", max_length=1024, description="Why the last eviction was refused (PDB name)."
    )


class Transition(ApiModel):
    time: Timestamp
    from_phase: Phase = Field(alias="from")
    to_phase: Phase = Field(alias="to")
    reason: str = Field(max_length=128)


class VerificationResult(StrEnum):
    PASSED = "Passed"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    """A workload wanted the node: the probe gave way, no verdict."""
    INCONCLUSIVE = "Inconclusive"
    """The probe ran but is no verdict (a check that could not run, GPUs not covered,
    no report within the validation timeout)."""


class VerificationStatus(ApiModel):
    """Periodic verification of the node while idle and in service."""

    last_time: Timestamp | None = Field(
        default=None, description="When the last verification ended, whatever its result."
    )
    last_result: VerificationResult | None = None
    message: str = Field(default="", max_length=1024, description="What the last one found.")
    next: Timestamp | None = Field(
        default=None, description="When the node is due (it waits while it has workload)."
    )
    job: str = Field(
        default="", max_length=63, description="The probe Job of the verification in flight."
    )
    started_at: Timestamp | None = None


class SlurmNodeStatus(ApiModel):
    """The node as Slurm sees it, when its policy drains through Slurm."""

    node: str = Field(max_length=253, description="The Slurm node name.")
    state: str = Field(
        default="", max_length=128, description="Slurm's state and flags (IDLE+DRAIN, ...)."
    )
    reason: str = Field(default="", max_length=1024, description="Slurm's reason for it.")
    drained_by: str = Field(
        default="",
        max_length=16,
        description="pitcrew (a drain Pitcrew made and will resume), other (a person's "
        "or Slurm's own, never undone by Pitcrew), or empty.",
    )


class ReservationStatus(ApiModel):
    """A spare reserved for the training job that lost a node, until the job's pod lands."""

    job: str = Field(
        max_length=63, description="The job, as the taint names it (<namespace>.<name>)."
    )
    since: Timestamp = Field(description="When the node was first seen reserved.")
    waiting_since: Timestamp | None = Field(
        default=None,
        description="When a pod of the job was first seen waiting for a node: "
        "spares.reservationTimeout counts from here.",
    )


class GPUNodeStatus(ApiModel):
    observed_generation: int = 0
    phase: Phase = Phase.PENDING
    phase_since: Timestamp | None = None
    reason: str = Field(default="", max_length=128)
    message: str = Field(default="", max_length=4096)
    policy: str = Field(default="", max_length=253)
    gpu_count: int = 0
    healthy_gpus: int = 0
    gpus: list[GpuStatus] = Field(default_factory=list, max_length=64)
    checks: ChecksStatus = Field(default_factory=ChecksStatus)
    probe: ChecksStatus | None = Field(
        default=None, description="Latest active validation report, written by the probe pod."
    )
    last_heartbeat: Timestamp | None = None
    watching: list[WatchedFinding] = Field(
        default_factory=list,
        max_length=64,
        description="Application and watch findings, since when they persist.",
    )
    probe_job: str = Field(
        default="",
        max_length=63,
        description="The probe Job validation waits for; only its report counts.",
    )
    probe_attempts: int = Field(
        default=0, ge=0, description="Probes started in this validation (bounded, then escalated)."
    )
    verification: VerificationStatus | None = None
    remediation: RemediationStatus | None = None
    repair_under_test: RepairUnderTest | None = None
    drain: DrainStatus | None = None
    slurm: SlurmNodeStatus | None = None
    reservation: ReservationStatus | None = None
    images: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Of a spare: the images of its pool's largest running training job "
        "that its kubelet reports it holds (Node status.images), pulled ahead of need "
        "(spares.prePullImages).",
    )
    remediations: list[Timestamp] = Field(
        default_factory=list,
        max_length=100,
        description="Start times of past remediations, for lemon detection.",
    )
    history: list[Transition] = Field(default_factory=list, max_length=HISTORY_LIMIT)
    conditions: list[Condition] = conditions_field()


class GPUNode(Resource):
    """Cluster-scoped record of one GPU node's health and lifecycle."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self.metadata.name == self.spec.nodeName",
                "spec.nodeName must equal metadata.name: a GPUNode is named after its Node",
            ),
        )
    )

    KIND: ClassVar[str] = "GPUNode"
    PLURAL: ClassVar[str] = "gpunodes"
    SHORT_NAMES: ClassVar[list[str]] = ["gpun"]
    PRINTER_COLUMNS: ClassVar[list[dict[str, str | int]]] = [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpuCount"},
        {"name": "Healthy", "type": "integer", "jsonPath": ".status.healthyGpus"},
        {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
        {
            "name": "Verified",
            "type": "string",
            "jsonPath": ".status.verification.lastResult",
            "priority": 1,
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]

    spec: GPUNodeSpec
    status: GPUNodeStatus = Field(default_factory=GPUNodeStatus)
