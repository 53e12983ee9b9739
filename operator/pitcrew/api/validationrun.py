"""ValidationRun: an on-demand acceptance test over a set of nodes.

A run is a request, not a setting: its spec cannot change once created (CEL
``self == oldSelf``), so the status always describes the spec beside it. It
rolls through the selected nodes a few at a time, so revalidating a fleet in
service never takes more than ``maxConcurrentNodes`` out of it at once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import ConfigDict, Field

from pitcrew.api.meta import (
    ApiModel,
    Condition,
    Duration,
    LabelSelector,
    Resource,
    Timestamp,
    cel,
    conditions_field,
    duration_field,
    validations,
)
from pitcrew.api.policy import NcclPairing, ValidationSuite


class PairingScope(StrEnum):
    WITHIN = "within"
    ACROSS = "across"


class RunPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class NodeResultStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"


class ValidationRunSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "self == oldSelf",
                "a ValidationRun cannot be changed once created; create a new one",
            ),
        )
    )

    node_selector: LabelSelector
    suite: ValidationSuite = ValidationSuite.STANDARD
    nccl_pairing: NcclPairing = NcclPairing.PAIRWISE
    topology_key: str = Field(
        default="topology.pitcrew.dev/rack",
        max_length=317,
        description="Node label that groups nodes (rack, leaf switch).",
    )
    pairing_scope: PairingScope = Field(
        default=PairingScope.WITHIN,
        description="Pair nodes within one topology group or across groups.",
    )
    timeout: Duration = duration_field(
        "1h", "Longest the whole run may take.", name="ValidationRun timeout"
    )
    max_concurrent_nodes: int = Field(default=4, ge=1, le=1000)


class NodeResult(ApiModel):
    node: str = Field(max_length=253)
    result: NodeResultStatus = NodeResultStatus.PENDING
    started_at: Timestamp | None = None
    partner: str = Field(
        default="",
        max_length=253,
        description="The partner of the pair test that decided the result.",
    )
    busbw_gbps: float | None = Field(
        default=None, description="Single-node all-reduce bus bandwidth."
    )
    message: str = Field(default="", max_length=1024)


class PairResult(ApiModel):
    """One multi-node all-reduce between two nodes; written by the pair probe."""

    name: str = Field(max_length=512, description="`<node-a>--<node-b>`.")
    nodes: list[str] = Field(min_length=2, max_length=2)
    attempt: int = Field(
        default=1, ge=1, le=2, description="2 when re-paired with a known-good partner."
    )
    result: NodeResultStatus = NodeResultStatus.PENDING
    busbw_gbps: float | None = None
    message: str = Field(default="", max_length=1024)


class BusBandwidth(ApiModel):
    min_gbps: float
    median_gbps: float
    max_gbps: float


class ValidationRunStatus(ApiModel):
    observed_generation: int = 0
    phase: RunPhase = RunPhase.PENDING
    started_at: Timestamp | None = None
    completed_at: Timestamp | None = None
    nodes: list[NodeResult] = Field(default_factory=list, max_length=5000)
    pairs: list[PairResult] = Field(
        default_factory=list,
        max_length=5000,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    busbw: BusBandwidth | None = None
    failed_nodes: list[str] = Field(default_factory=list, max_length=5000)
    conditions: list[Condition] = conditions_field()


class ValidationRun(Resource):
    """Cluster-scoped request to validate the selected nodes once."""

    KIND: ClassVar[str] = "ValidationRun"
    PLURAL: ClassVar[str] = "validationruns"
    SHORT_NAMES: ClassVar[list[str]] = ["vrun"]
    PRINTER_COLUMNS: ClassVar[list[dict[str, str | int]]] = [
        {"name": "Suite", "type": "string", "jsonPath": ".spec.suite"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Failed", "type": "string", "jsonPath": ".status.failedNodes"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]

    spec: ValidationRunSpec
    status: ValidationRunStatus = Field(default_factory=ValidationRunStatus)
