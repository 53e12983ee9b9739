"""Simulated GPUs: realistic healthy values per model, with injectable faults.

Healthy values follow the model table (PCIe generation and width, NVLink link
count, slowdown temperature, power). Faults from :mod:`gpuhealth.faults` are
applied on top, and counters that a storm drives (SBE ECC, PCIe replays,
NVLink CRC, IB link-downed and symbol errors) grow with the time since the
fault was injected, read from the backend's clock; so rate checks see a rate,
exactly as on hardware, and tests control time instead of sleeping.

An ``xid`` fault produces one XID event the first time it is sampled, as the
driver logs it once; it stays in the fault list (the annotation) until
cleared, but is not reported again. Given a kernel log (:class:`KernelLog`), the
simulated node also reports the XIDs and SXids the log shows, as NVML's backend
does: a real node without GPUs then reads its real ``/dev/kmsg`` the way the agent
on a GPU node would, and a driver line written there is a fault of the simulated GPU
at that bus address.

Healthy readings are noisy by default (:mod:`gpuhealth.backends.noise`):
temperatures wander, power and clocks follow the load, correctable counters
tick, and NVML now and then fails a read or is slow. ``noise=0`` gives the
exact, constant values a unit test of one threshold wants.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from gpuhealth import faults as f
from gpuhealth.backends.noise import Noise, NoiseSource
from gpuhealth.kernel_log import KernelLog
from gpuhealth.models import GpuModel
from gpuhealth.report import GpuIdentity
from gpuhealth.samples import (
    ClockEvent,
    GpuSample,
    IbPortSample,
    NodeSample,
    NvLinkSample,
    SxidEvent,
    XidEvent,
)

HEALTHY_DRIVER = "560.35.03"
HEALTHY_CUDA = "12.6"
HEALTHY_VBIOS = "96.00.99.00.01"
IB_PORTS = 8
IB_RATE_GBPS = 400.0
IB_TRAFFIC_BYTES_PER_S = 20e9

Clock = Callable[[], datetime.datetime]
F = TypeVar("F", bound=f.FaultBase)


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class SimNvmlError(RuntimeError):
    """A transient failure of the whole read, as ``NVML_ERROR_UNKNOWN`` is on hardware.

    Deliberately not a :class:`~gpuhealth.errors.GpuhealthError`: it stands in for
    pynvml's ``NVMLError``, which :meth:`NvmlBackend.sample
    <gpuhealth.backends.nvml.NvmlBackend.sample>` lets through unwrapped (from
    ``nvmlDeviceGetCount``), so that code written against the simulator handles it
    where it will meet the driver's error, not where gpuhealth's own are caught.
    pynvml's class itself is not used: gpuhealth imports pynvml only in the NVML
    backend, when it is chosen."""


class SimBackend:
    """A node of ``gpus`` simulated GPUs of one model."""

    name = "sim"

    def __init__(
        self,
        *,
        node: str,
        model: GpuModel,
        gpus: int = 8,
        clock: Clock = utc_now,
        noise: Noise | float = 1.0,
        sleep: Callable[[float], object] = time.sleep,
        kernel_log: KernelLog | None = None,
    ) -> None:
        self.node = node
        self.kernel_log = kernel_log
        self.model = model
        self.gpu_count = gpus
        self.clock = clock
        self.sleep = sleep
        """How a slow NVML call waits (an accelerated benchmark passes its clock's)."""
        self.started = clock()
        self.noise = NoiseSource(Noise.of(noise), node=node, model=model, gpus=gpus, ports=IB_PORTS)
        self._noised_at = self.started
        self._faults: dict[f.Fault, datetime.datetime] = {}
        self._reported_xids: set[f.Fault] = set()

    @property
    def faults(self) -> list[f.Fault]:
        return list(self._faults)

    def set_faults(self, faults: Sequence[f.Fault]) -> None:
        """Replace the active faults; a fault already active keeps its start time."""
        now = self.clock()
        self._faults = {fault: self._faults.get(fault, now) for fault in faults}
        self._reported_xids &= set(self._faults)

    def replay_xids(self) -> None:
        """Report the active XID faults again, as a driver does when a GPU that a
        repair did not fix hits the same error again."""
        self._reported_xids.clear()

    def _minutes_since(self, fault: f.Fault) -> float:
        return max((self.clock() - self._faults[fault]).total_seconds(), 0.0) / 60.0

    def _of(self, kind: type[F], gpu: int | None = None) -> list[F]:
        return [
            x
            for x in self._faults
            if isinstance(x, kind) and (gpu is None or getattr(x, "gpu", None) == gpu)
        ]

    def _grown(
        self, storms: Iterable[f.EccSbeStorm | f.PcieReplayStorm | f.IbSymbolErrors]
    ) -> float:
        """A storm's counter: its rate times the minutes since it was injected."""
        return sum(x.per_minute * self._minutes_since(x) for x in storms)

    def _has(self, kind: type[f.FaultBase], gpu: int) -> bool:
        return bool(self._of(kind, gpu))

    def identity(self, index: int) -> GpuIdentity:
        return GpuIdentity(
            index=index,
            uuid=f"GPU-{zlib.crc32(f'{self.node}/{index}'.encode()):08x}-0000-4000-8000-{index:012x}",
            model=self.model.nvml_names[0],
            serial=f"SIM{zlib.crc32(self.node.encode()):010d}{index:02d}",
            pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        )

    def _gpu(self, index: int) -> GpuSample | None:
        if self._has(f.GpuMissing, index):
            return None
        model = self.model
        noise = self.noise.reading(index)
        events: set[ClockEvent] = set()
        temperature = noise.temperature_c
        if self._has(f.ThermalSlowdown, index):
            events |= {ClockEvent.HW_THERMAL, ClockEvent.HW_SLOWDOWN}
            temperature = model.slowdown_temp_c + 1
        if self._has(f.PowerBrake, index):
            events |= {ClockEvent.HW_POWER_BRAKE, ClockEvent.HW_SLOWDOWN}
        sbe = self._grown(self._of(f.EccSbeStorm, index)) + noise.sbe
        dbe = sum(x.count for x in self._of(f.EccDbe, index))
        pcie_gen, pcie_width = model.pcie_gen, model.pcie_width
        for downtrain in self._of(f.PcieDowntrain, index):
            pcie_gen, pcie_width = downtrain.gen, downtrain.width
        retired = self._of(f.RetiredPages, index)
        replays = self._grown(self._of(f.PcieReplayStorm, index)) + noise.pcie_replays
        down = {x.link for x in self._of(f.NvlinkDown, index)}
        crc = {link: float(count) for link, count in noise.nvlink_crc.items()}
        for storm in self._of(f.NvlinkCrcStorm, index):
            crc[storm.link] = crc.get(storm.link, 0.0) + storm.per_minute * self._minutes_since(
                storm
            )
        sample = GpuSample(
            identity=self.identity(index),
            temperature_c=temperature,
            slowdown_temp_c=model.slowdown_temp_c,
            power_w=noise.power_w,
            sm_clock_mhz=noise.sm_clock_mhz,
            clock_events=frozenset(events),
            ecc_sbe_volatile=int(sbe),
            ecc_dbe_volatile=dbe,
            ecc_sbe_aggregate=int(sbe),
            ecc_dbe_aggregate=dbe,
            remap_correctable=0,
            remap_uncorrectable=dbe,
            remap_pending=self._has(f.RowRemapPending, index) or dbe > 0,
            remap_failure=self._has(f.RowRemapFailure, index),
            retired_pages_sbe=sum(x.sbe for x in retired),
            retired_pages_dbe=sum(x.dbe for x in retired),
            retired_pages_pending=any(x.pending for x in retired),
            pcie_gen=pcie_gen,
            pcie_width=pcie_width,
            pcie_max_gen=model.pcie_gen,
            pcie_max_width=model.pcie_width,
            pcie_replay=int(replays),
            nvlinks=tuple(
                NvLinkSample(link=link, active=link not in down, crc_errors=int(crc.get(link, 0)))
                for link in range(model.nvlink_links if self.gpu_count > 1 else 0)
            ),
            fabric_state=self._fabric_state(),
            fabric_error=next(
                (x.error for x in self._of(f.FabricRegistrationFailed) if x.gpu in (None, index)),
                "",
            ),
            mig_enabled=self._has(f.MigEnabled, index),
            persistence_mode=not self._has(f.PersistenceOff, index),
            vbios_version=HEALTHY_VBIOS,
        )
        return sample if noise.failed_field is None else _failed(sample, noise.failed_field)

    def _fabric_state(self) -> str | None:
        """An NVSwitch board's fabric registration. A lone GPU (one SXM part passed
        through to a VM) reports neither NVLinks nor a fabric, as NVML did on a
        single-H200 machine."""
        if not self.model.nvlink_fabric or self.gpu_count < 2:
            return None
        return "not-started" if self._of(f.FabricManagerDown) else "completed"

    def _sxids(self) -> list[SxidEvent]:
        events = []
        for fault in self._of(f.Sxid):
            if fault in self._reported_xids:
                continue
            self._reported_xids.add(fault)
            events.append(
                SxidEvent(
                    code=fault.code,
                    switch=f"nvswitch{fault.switch}",
                    pci_bus_id=f"0000:{0x05 + fault.switch:02x}:00.0",
                    severity=fault.severity,
                    link=fault.link,
                    message=f"simulated SXid {fault.code}",
                    time=self.clock(),
                )
            )
        return events

    def _xids(self, gpus: dict[int, GpuSample]) -> list[XidEvent]:
        now = self.clock()
        events = []
        for fault in self._of(f.Xid):
            if fault in self._reported_xids:
                continue
            self._reported_xids.add(fault)
            bus = self.identity(fault.gpu).pci_bus_id
            events.append(
                XidEvent(
                    code=fault.code,
                    gpu=fault.gpu if fault.gpu in gpus else None,
                    pci_bus_id=bus,
                    message=f"simulated Xid {fault.code}",
                    time=now,
                )
            )
        for index in range(self.gpu_count):
            if index not in gpus and self._has(f.GpuMissing, index):
                # A GPU that falls off the bus logs XID 79 once, like the driver does.
                marker = f.Xid(type="xid", gpu=index, code=79)
                if marker not in self._reported_xids:
                    self._reported_xids.add(marker)
                    events.append(
                        XidEvent(
                            code=79,
                            gpu=None,
                            pci_bus_id=self.identity(index).pci_bus_id,
                            message="GPU has fallen off the bus.",
                            time=now,
                        )
                    )
        return events

    def _ib_ports(self) -> tuple[IbPortSample, ...]:
        elapsed = (self.clock() - self.started).total_seconds()
        ports = []
        missing = {x.port for x in self._of(f.IbPortMissing)}
        for index in range(IB_PORTS):
            name = f"mlx5_{index}/1"
            if name in missing:
                continue
            is_down = any(x.port == name for x in self._of(f.IbPortDown))
            flaps = sum(
                x.per_hour * self._minutes_since(x) / 60.0
                for x in self._of(f.IbFlapping)
                if x.port == name
            )
            symbols = self._grown(x for x in self._of(f.IbSymbolErrors) if x.port == name)
            symbols += self.noise.ib_symbols[index]
            rate = min(
                (x.rate_gbps for x in self._of(f.IbRateDegraded) if x.port == name),
                default=IB_RATE_GBPS,
            )
            traffic = 0 if is_down else int(IB_TRAFFIC_BYTES_PER_S * elapsed)
            ports.append(
                IbPortSample(
                    name=name,
                    state="DOWN" if is_down else "ACTIVE",
                    phys_state="Disabled" if is_down else "LinkUp",
                    rate_gbps=rate,
                    link_downed=int(flaps),
                    symbol_error=int(symbols),
                    link_error_recovery=int(flaps),
                    xmit_bytes=traffic,
                    rcv_bytes=traffic,
                )
            )
        return tuple(ports)

    def sample(self) -> NodeSample:
        now = self.clock()
        self.noise.advance(max((now - self._noised_at).total_seconds(), 0.0) / 60.0)
        self._noised_at = max(now, self._noised_at)
        if delay := self.noise.slow_call_s():
            self.sleep(delay)
        if self.noise.sample_fails():
            raise SimNvmlError("NVML_ERROR_UNKNOWN: simulated transient driver error")
        gpus = {i: g for i in range(self.gpu_count) if (g := self._gpu(i)) is not None}
        driver = next((x.version for x in self._of(f.DriverMismatch)), HEALTHY_DRIVER)
        xids, sxids, errors = self._xids(gpus), self._sxids(), {}
        if self.kernel_log is not None:
            found = self.kernel_log.read()
            xids.extend(found.xids)
            sxids.extend(found.sxids)
            if self.kernel_log.error:
                errors["xid"] = self.kernel_log.error
            if self.kernel_log.partial_reason:
                errors["kernel-log"] = self.kernel_log.partial_reason
        return NodeSample(
            time=self.clock(),
            gpus=tuple(gpus.values()),
            driver_version=driver,
            cuda_version=HEALTHY_CUDA,
            xids=tuple(xids),
            sxids=tuple(sxids),
            ib_ports=self._ib_ports(),
            errors=errors,
        )

    def release(self) -> None:
        """Simulated GPUs hold no device open."""

    def reacquire(self) -> None:
        """Nothing was closed."""

    def close(self) -> None:
        if self.kernel_log is not None:
            self.kernel_log.close()


_UNREAD: dict[str, dict[str, Any]] = {
    "temperature": {"temperature_c": None, "slowdown_temp_c": None},
    "power": {"power_w": None},
    "ecc": dict.fromkeys(
        ("ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate")
    ),
    "remap": dict.fromkeys(
        ("remap_correctable", "remap_uncorrectable", "remap_pending", "remap_failure")
    ),
    "pcie": dict.fromkeys(
        ("pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width", "pcie_replay")
    ),
    "nvlink": {"nvlinks": ()},
    "clocks": {"clock_events": frozenset(), "sm_clock_mhz": None},
    "fabric": {"fabric_state": None, "fabric_error": ""},
}
"""What NVML leaves unread when one of its calls fails: the fields of that call."""


def _failed(sample: GpuSample, read: str) -> GpuSample:
    """``sample`` as NVML returns it when the ``read`` call failed transiently."""
    return dataclasses.replace(
        sample,
        **_UNREAD[read],
        errors={**sample.errors, read: f"NVML {read}: Unknown Error (simulated, transient)"},
    )
