"""The fault vocabulary: faults the simulated backend can inject.

One JSON list of faults is the language shared by sim scenarios, the
``sim.pitcrew.dev/faults`` Node annotation read by the simulated agents, the
demo's fault schedule and the tests, documented in ``docs/faults.md``. Each
fault is a small typed record with a ``type`` discriminator; an unknown type
or a missing field is refused with a message naming it, so a typo in a
scenario never silently means "healthy".
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from gpuhealth.errors import GpuhealthError

GpuIndex = Annotated[int, Field(ge=0, le=63)]


class FaultBase(BaseModel):
    """Common base of every fault record."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Xid(FaultBase):
    type: Literal["xid"]
    gpu: GpuIndex
    code: int = Field(ge=1, le=1000)


class GpuMissing(FaultBase):
    type: Literal["gpu-missing"]
    gpu: GpuIndex


class EccDbe(FaultBase):
    type: Literal["ecc-dbe"]
    gpu: GpuIndex
    count: int = Field(default=1, ge=1)


class EccSbeStorm(FaultBase):
    type: Literal["ecc-sbe-storm"]
    gpu: GpuIndex
    per_minute: float = Field(gt=0)


class RowRemapPending(FaultBase):
    type: Literal["row-remap-pending"]
    gpu: GpuIndex


class RowRemapFailure(FaultBase):
    type: Literal["row-remap-failure"]
    gpu: GpuIndex


class ThermalSlowdown(FaultBase):
    type: Literal["thermal-slowdown"]
    gpu: GpuIndex


class PowerBrake(FaultBase):
    type: Literal["power-brake"]
    gpu: GpuIndex


class PcieDowntrain(FaultBase):
    type: Literal["pcie-downtrain"]
    gpu: GpuIndex
    gen: int = Field(ge=1, le=6)
    width: int = Field(ge=1, le=16)


class NvlinkDown(FaultBase):
    type: Literal["nvlink-down"]
    gpu: GpuIndex
    link: int = Field(ge=0, le=17)


class NvlinkCrcStorm(FaultBase):
    type: Literal["nvlink-crc-storm"]
    gpu: GpuIndex
    link: int = Field(ge=0, le=17)
    per_minute: float = Field(default=1000.0, gt=0)


class RetiredPages(FaultBase):
    type: Literal["retired-pages"]
    gpu: GpuIndex
    sbe: int = Field(default=0, ge=0, description="Pages retired for repeated correctable errors.")
    dbe: int = Field(default=0, ge=0, description="Pages retired for uncorrectable errors.")
    pending: bool = False


class PcieReplayStorm(FaultBase):
    type: Literal["pcie-replay-storm"]
    gpu: GpuIndex
    per_minute: float = Field(gt=0)


class MigEnabled(FaultBase):
    type: Literal["mig-enabled"]
    gpu: GpuIndex


class PersistenceOff(FaultBase):
    type: Literal["persistence-off"]
    gpu: GpuIndex


class SlowGemm(FaultBase):
    type: Literal["slow-gemm"]
    gpu: GpuIndex
    factor: float = Field(gt=1, description="How many times slower than healthy.")


class SlowHbm(FaultBase):
    type: Literal["slow-hbm"]
    gpu: GpuIndex
    factor: float = Field(gt=1)


class SlowNccl(FaultBase):
    type: Literal["slow-nccl"]
    factor: float = Field(gt=1)


class ProbeError(FaultBase):
    """An active probe that crashes instead of measuring (a benchmark that dies,
    a CUDA error): the probe reports ``error``, not a pass and not a failure."""

    type: Literal["probe-error"]
    probe: Literal["gemm", "hbm", "pcie-bandwidth", "nccl-allreduce"]
    gpu: GpuIndex | None = Field(
        default=None, description="Only this GPU; every GPU when omitted (and for all-reduce)."
    )


class DriverMismatch(FaultBase):
    type: Literal["driver-mismatch"]
    version: str = Field(min_length=1, max_length=32)


class IbPortDown(FaultBase):
    type: Literal["ib-port-down"]
    port: str = Field(min_length=1, max_length=64, description="e.g. mlx5_0/1")


class IbFlapping(FaultBase):
    type: Literal["ib-flapping"]
    port: str = Field(min_length=1, max_length=64)
    per_hour: float = Field(gt=0)


class IbPortMissing(FaultBase):
    type: Literal["ib-port-missing"]
    port: str = Field(min_length=1, max_length=64)


class IbRateDegraded(FaultBase):
    type: Literal["ib-rate-degraded"]
    port: str = Field(min_length=1, max_length=64)
    rate_gbps: float = Field(gt=0, description="The rate the port trained at, e.g. 200.")


class Sxid(FaultBase):
    """An NVSwitch logs an SXid once, as the nvswitch driver does."""

    type: Literal["sxid"]
    code: int = Field(ge=1, le=99999)
    switch: int = Field(default=0, ge=0, le=15, description="nvswitchN")
    severity: Literal["fatal", "non-fatal", ""] = Field(
        default="", description="What the line says of itself; empty: the SXid table decides."
    )
    link: int | None = Field(default=None, ge=0, le=143)


class FabricManagerDown(FaultBase):
    """The fabric manager is not running: no GPU of the node starts registering with
    the NVLink fabric (an NVSwitch board only)."""

    type: Literal["fabric-manager-down"]


class FabricRegistrationFailed(FaultBase):
    """Fabric registration completed with an error (on one GPU, or on every GPU)."""

    type: Literal["fabric-registration-failed"]
    gpu: GpuIndex | None = None
    error: str = Field(default="NVML_ERROR_UNKNOWN", min_length=1, max_length=64)


class IbSymbolErrors(FaultBase):
    type: Literal["ib-symbol-errors"]
    port: str = Field(min_length=1, max_length=64)
    per_minute: float = Field(gt=0)


Fault = Annotated[
    Xid
    | GpuMissing
    | EccDbe
    | EccSbeStorm
    | RowRemapPending
    | RowRemapFailure
    | RetiredPages
    | PcieReplayStorm
    | MigEnabled
    | PersistenceOff
    | ThermalSlowdown
    | PowerBrake
    | PcieDowntrain
    | NvlinkDown
    | NvlinkCrcStorm
    | SlowGemm
    | SlowHbm
    | SlowNccl
    | ProbeError
    | DriverMismatch
    | IbPortDown
    | IbFlapping
    | IbPortMissing
    | IbRateDegraded
    | IbSymbolErrors
    | Sxid
    | FabricManagerDown
    | FabricRegistrationFailed,
    Field(discriminator="type"),
]

_FAULT_LIST = TypeAdapter(list[Fault])


class FaultListError(GpuhealthError, ValueError):
    """A fault list that is not valid JSON or not in the vocabulary."""


MAX_FAULT_LIST_BYTES = 65536
"""The longest fault list read: a few hundred bytes describe a node's faults, and a
node annotation anyone can write must not make its agent parse megabytes."""


def parse_faults(text: str) -> list[Fault]:
    """Parse a JSON fault list; errors name the entry and field at fault."""
    if len(text) > MAX_FAULT_LIST_BYTES:
        raise FaultListError(
            f"fault list is {len(text)} bytes, over the {MAX_FAULT_LIST_BYTES} read"
        )
    try:
        raw = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as error:
        raise FaultListError(f"fault list is not JSON: {error}") from error
    try:
        return _FAULT_LIST.validate_python(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"entry {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise FaultListError(f"invalid fault list: {problems}") from error


def dump_faults(faults: list[Fault]) -> str:
    return _FAULT_LIST.dump_json(faults).decode()
