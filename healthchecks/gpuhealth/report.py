"""The health report: the one data shape every check produces and every consumer reads.

Versioned as ``gpuhealth.dev/v1``. The node agent writes it into
``GPUNode.status.checks``, probe Jobs write it after active tests, and
``gpuhealth check --json`` prints it, so a Slurm prolog and the Kubernetes
operator judge a GPU from exactly the same facts. Field names are camelCase in
JSON because the report lands inside a Kubernetes object.
"""

from __future__ import annotations

import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

REPORT_API_VERSION = "gpuhealth.dev/v1"


class CheckStatus(StrEnum):
    """Outcome of one check.

    ``error`` means the check could not run (NVML missing, a probe that did
    not start): it is not evidence against the GPU and never quarantines a
    node by itself.
    """

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"
    SKIPPED = "skipped"


class FaultClass(StrEnum):
    """How bad a failed check is, which decides the node's path through the lifecycle."""

    NONE = "none"
    FATAL = "fatal"
    DEGRADED = "degraded"
    APPLICATION = "application"
    WATCH = "watch"


class RecommendedAction(StrEnum):
    """What a human or the operator should do about a finding."""

    NONE = "none"
    RESTART_JOB = "restart-job"
    RESET_GPU = "reset-gpu"
    REBOOT = "reboot"
    REIMAGE = "reimage"
    REPLACE = "replace"


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class GpuIdentity(_Model):
    """Which physical GPU a result is about."""

    index: int = Field(ge=0, le=63)
    uuid: str = Field(default="", max_length=64)
    model: str = Field(default="", max_length=64)
    serial: str = Field(default="", max_length=64)
    pci_bus_id: str = Field(default="", max_length=32)


class CheckResult(_Model):
    """One check's verdict, for one GPU or (``gpu`` null) for the whole node."""

    name: str = Field(min_length=1, max_length=63, description="Check name, e.g. `xid`, `ecc`.")
    status: CheckStatus
    gpu: int | None = Field(default=None, ge=0, le=63, description="GPU index, null for node.")
    observed: float | None = Field(
        default=None, description="Measured value; text facts (versions) go in the message."
    )
    threshold: float | None = Field(default=None, description="Limit the value met or broke.")
    unit: str = Field(default="", max_length=32)
    fault_class: FaultClass = FaultClass.NONE
    action: RecommendedAction = RecommendedAction.NONE
    message: str = Field(default="", max_length=1024)


class Report(_Model):
    """A full health report for one node at one time."""

    api_version: str = Field(default=REPORT_API_VERSION, pattern=r"^gpuhealth\.dev/v1$")
    node: str = Field(max_length=253)
    time: datetime.datetime
    backend: str = Field(max_length=16, description="`nvml` or `sim`.")
    suite: str = Field(default="passive", max_length=16)
    gpus: list[GpuIdentity] = Field(default_factory=list, max_length=64)
    checks: list[CheckResult] = Field(default_factory=list, max_length=1024)

    @property
    def healthy(self) -> bool:
        return not any(c.status is CheckStatus.FAIL for c in self.checks)
