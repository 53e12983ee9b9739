"""Raw facts read from a node at one instant: what backends produce, checks consume.

Checks are pure functions of samples (plus the counter history for rates),
so they are tested on the simulated backend and on hand-made samples alike.
``None`` means the device or driver does not report that value
(``NVML_ERROR_NOT_SUPPORTED``): the check that needs it reports ``skipped``.
A value that NVML failed to read for another reason is recorded in
``GpuSample.errors`` and the check reports ``error``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import StrEnum

from gpuhealth import sxid, xid
from gpuhealth.report import GpuIdentity


class ClockEvent(StrEnum):
    """Clock-event (throttle) reasons that mean the hardware is slowing the GPU."""

    HW_SLOWDOWN = "hw-slowdown"
    HW_THERMAL = "hw-thermal"
    HW_POWER_BRAKE = "hw-power-brake"
    SW_THERMAL = "sw-thermal"


@dataclass(frozen=True)
class NvLinkSample:
    link: int
    active: bool
    crc_errors: int = 0
    replay_errors: int = 0
    recovery_errors: int = 0


@dataclass(frozen=True)
class GpuSample:
    identity: GpuIdentity
    lost: bool = False
    """NVML answered ``GPU_IS_LOST``: the GPU fell off the bus."""
    temperature_c: float | None = None
    slowdown_temp_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    clock_events: frozenset[ClockEvent] = frozenset()
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None
    ecc_dbe_aggregate: int | None = None
    remap_correctable: int | None = None
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    pcie_replay: int | None = None
    nvlinks: tuple[NvLinkSample, ...] = ()
    fabric_state: str | None = None
    """NVLink fabric registration (NVSwitch boards): ``not-started``, ``in-progress``
    or ``completed``; ``None`` where the GPU has no fabric to join."""
    fabric_error: str = ""
    """The error registration completed with; empty for success."""
    mig_enabled: bool | None = None
    persistence_mode: bool | None = None
    vbios_version: str | None = None
    errors: dict[str, str] = field(default_factory=dict)
    """Field name -> NVML error text, for reads that failed."""


@dataclass(frozen=True)
class XidEvent:
    code: int
    gpu: int | None
    """GPU index, when the PCI bus id in the event maps to a known GPU."""
    pci_bus_id: str = ""
    message: str = ""
    time: datetime.datetime | None = None
    gpu_instance: int | None = None
    """MIG GPU instance the driver blamed (``GPU-I:02``), ``None`` without MIG attribution."""
    compute_instance: int | None = None
    """MIG compute instance the driver blamed (``GPU-CI:00``), likewise."""
    pid: int | None = None
    """Process that owned the channel in error; ``None`` when the driver printed
    ``pid='<unknown>'`` or no pid at all."""
    process: str | None = None
    """That process's name (``name=python3``); ``None`` for ``<unknown>`` or none."""

    @property
    def rule(self) -> xid.XidRule:
        """What the XID table says of this event: fault class, action, description."""
        return xid.classify(self.code, self.message)


@dataclass(frozen=True)
class SxidEvent:
    """An NVSwitch error the nvswitch driver logged (``nvidia-nvswitch3: SXid (PCI:...)``).

    It is about a switch of the NVLink fabric, never about one GPU, so it is
    never an :class:`XidEvent`.
    """

    code: int
    switch: str = ""
    """The driver's device name, ``nvswitch3``; empty when the line has no prefix."""
    pci_bus_id: str = ""
    """The switch's PCI address as logged, ``0000:05:00.0``."""
    severity: str = ""
    """What the line said of itself: ``fatal``, ``non-fatal`` or ``correctable``
    (:data:`gpuhealth.sxid.SEVERITIES`); empty when it said nothing."""
    link: int | None = None
    message: str = ""
    time: datetime.datetime | None = None

    @property
    def rule(self) -> sxid.SxidRule:
        """What the SXid table makes of this event (:func:`gpuhealth.sxid.classify`)."""
        return sxid.classify(self.code, self.severity)


@dataclass(frozen=True)
class IbPortSample:
    """One InfiniBand/RoCE port, as sysfs shows it."""

    name: str
    """``device/port``, e.g. ``mlx5_0/1``."""
    state: str
    """``ACTIVE``, ``DOWN``, ``INIT``... (the word after the number in sysfs)."""
    phys_state: str
    """``LinkUp``, ``Polling``, ``Disabled``..."""
    rate_gbps: float
    link_layer: str = "InfiniBand"
    link_downed: int = 0
    symbol_error: int = 0
    link_error_recovery: int = 0
    xmit_bytes: int = 0
    rcv_bytes: int = 0


@dataclass(frozen=True)
class NodeSample:
    time: datetime.datetime
    gpus: tuple[GpuSample, ...]
    driver_version: str | None = None
    cuda_version: str | None = None
    xids: tuple[XidEvent, ...] = ()
    sxids: tuple[SxidEvent, ...] = ()
    """NVSwitch errors read from the kernel log since the last sample."""
    ib_ports: tuple[IbPortSample, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    """Node-level reads that failed (e.g. ``xid``: kernel log unreadable)."""
