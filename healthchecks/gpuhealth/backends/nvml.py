"""Real GPUs through NVML (nvidia-ml-py, ``import pynvml``).

Importing this module never needs the driver; constructing the backend does,
and fails with ``NVML not available: ...`` where there is none. Every NVML
read is guarded on its own: ``NOT_SUPPORTED`` leaves the field ``None`` (the
check is skipped), ``GPU_IS_LOST`` marks the GPU lost (a fatal finding, not a
crash), any other error is recorded per field (the check reports ``error``).
Critical XIDs arrive through NVML's event set and the kernel log; both feed
the same XID check. The backend can let go of the GPUs for a reset
(:meth:`NvmlBackend.release`: ``nvidia-smi -r`` is refused "in use by another
client" while NVML handles keep ``/dev/nvidiaN`` open) and take them again after it
(:meth:`NvmlBackend.reacquire`). NVSwitch SXids come from the kernel log only, into
``NodeSample.sxids``; kernel-log lines the parser could not read are reported
in ``NodeSample.errors["kernel-log"]`` (see :attr:`KernelLog.partial_reason`)
while their neighbours' events are still delivered.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gpuhealth.backends.base import BackendUnavailableError
from gpuhealth.errors import GpuhealthError
from gpuhealth.kernel_log import KMSG, KernelLog
from gpuhealth.parsers.kmsg import normalize_bus_id
from gpuhealth.report import FaultClass, GpuIdentity
from gpuhealth.samples import ClockEvent, GpuSample, NodeSample, NvLinkSample, SxidEvent, XidEvent
from gpuhealth.sysfs_ib import DEFAULT_ROOT, read_ports
from gpuhealth.xid import classify

T = TypeVar("T")
MAX_NVLINKS = 18


class GpuLostError(GpuhealthError):
    """Raised inside a read when NVML says the GPU is lost."""


def _load() -> Any:
    try:
        import pynvml  # noqa: PLC0415 - optional at import time of gpuhealth
    except ImportError as error:
        raise BackendUnavailableError(f"NVML not available: {error}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise BackendUnavailableError(f"NVML not available: {error}") from None
    return pynvml


def nvml_device_name(index: int = 0) -> str:
    """The name NVML gives GPU ``index`` (what ``nvidia-smi`` prints), for
    commands that need the model without sampling the whole node."""
    nvml = _load()
    try:
        return _text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(index)))
    except nvml.NVMLError as error:
        raise BackendUnavailableError(f"NVML: GPU {index}: {error}") from None
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


class NvmlBackend:
    name = "nvml"

    def __init__(self, *, kernel_log: Path | None = KMSG, sysfs_ib: Path = DEFAULT_ROOT) -> None:
        self.nvml = _load()
        self.kernel_log = KernelLog(kernel_log) if kernel_log else None
        self.sysfs_ib = sysfs_ib
        self._events = self._register_xid_events()
        self._pending: list[XidEvent] = []
        self._pending_sxids: list[SxidEvent] = []
        self._released = False
        self._lock = threading.Lock()
        """Held by :meth:`wait_for_xid` while it waits on the event set, and by
        :meth:`release` and :meth:`reacquire`, which free and recreate it from
        another thread."""

    def _register_xid_events(self) -> Any:
        nvml = self.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                try:
                    nvml.nvmlDeviceRegisterEvents(
                        handle, nvml.nvmlEventTypeXidCriticalError, event_set
                    )
                except nvml.NVMLError:
                    continue  # not supported on this GPU: the kernel log still covers it
        except nvml.NVMLError:
            return None
        return event_set

    def _read(self, errors: dict[str, str], field: str, read: Callable[[], T]) -> T | None:
        nvml = self.nvml
        try:
            return read()
        except nvml.NVMLError_NotSupported:
            return None
        except nvml.NVMLError_GpuIsLost:
            raise GpuLostError from None
        except nvml.NVMLError as error:
            errors[field] = f"NVML {field}: {error}"
            return None

    def _gpu(self, index: int) -> GpuSample:
        nvml = self.nvml
        errors: dict[str, str] = {}
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            return self._read_gpu(index, handle, errors)
        except (GpuLostError, nvml.NVMLError_GpuIsLost):
            return GpuSample(identity=GpuIdentity(index=index), lost=True)

    def _read_gpu(self, index: int, handle: Any, errors: dict[str, str]) -> GpuSample:
        nvml = self.nvml

        def read(field: str, fn: Callable[[], T]) -> T | None:
            return self._read(errors, field, fn)

        pci = read("pci", lambda: nvml.nvmlDeviceGetPciInfo(handle))
        identity = GpuIdentity(
            index=index,
            uuid=read("uuid", lambda: nvml.nvmlDeviceGetUUID(handle)) or "",
            model=read("name", lambda: nvml.nvmlDeviceGetName(handle)) or "",
            serial=read("serial", lambda: nvml.nvmlDeviceGetSerial(handle)) or "",
            pci_bus_id=_text(pci.busId) if pci is not None else "",
        )
        reasons = read("clocks", lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)) or 0
        events = {
            event
            for event, bit in (
                (ClockEvent.HW_SLOWDOWN, nvml.nvmlClocksEventReasonHwSlowdown),
                (ClockEvent.HW_THERMAL, nvml.nvmlClocksEventReasonHwThermalSlowdown),
                (ClockEvent.HW_POWER_BRAKE, nvml.nvmlClocksEventReasonHwPowerBrakeSlowdown),
                (ClockEvent.SW_THERMAL, nvml.nvmlClocksEventReasonSwThermalSlowdown),
            )
            if reasons & bit
        }

        def ecc(error_type: int, counter: int) -> int | None:
            return read(
                "ecc", lambda: int(nvml.nvmlDeviceGetTotalEccErrors(handle, error_type, counter))
            )

        remap = read("remap", lambda: nvml.nvmlDeviceGetRemappedRows(handle))
        sbe_pages = read(
            "retired_pages",
            lambda: len(
                nvml.nvmlDeviceGetRetiredPages(
                    handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
                )
            ),
        )
        dbe_pages = read(
            "retired_pages",
            lambda: len(
                nvml.nvmlDeviceGetRetiredPages(
                    handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
                )
            ),
        )
        power = read("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        mig = read("mig", lambda: nvml.nvmlDeviceGetMigMode(handle))
        persistence = read("persistence", lambda: nvml.nvmlDeviceGetPersistenceMode(handle))
        return GpuSample(
            identity=identity,
            temperature_c=read(
                "temperature",
                lambda: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            ),
            slowdown_temp_c=read(
                "temperature",
                lambda: float(
                    nvml.nvmlDeviceGetTemperatureThreshold(
                        handle, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
                    )
                ),
            ),
            power_w=None if power is None else power / 1000.0,
            sm_clock_mhz=read(
                "clocks", lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
            ),
            clock_events=frozenset(events),
            ecc_sbe_volatile=ecc(nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_VOLATILE_ECC),
            ecc_dbe_volatile=ecc(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
            ecc_sbe_aggregate=ecc(nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC),
            ecc_dbe_aggregate=ecc(nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC),
            remap_correctable=None if remap is None else int(remap[0]),
            remap_uncorrectable=None if remap is None else int(remap[1]),
            remap_pending=None if remap is None else bool(remap[2]),
            remap_failure=None if remap is None else bool(remap[3]),
            retired_pages_sbe=sbe_pages,
            retired_pages_dbe=dbe_pages,
            retired_pages_pending=read(
                "retired_pages", lambda: bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
            ),
            pcie_gen=read("pcie", lambda: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))),
            pcie_width=read("pcie", lambda: int(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle))),
            pcie_max_gen=read("pcie", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))),
            pcie_max_width=read("pcie", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))),
            pcie_replay=read("pcie", lambda: int(nvml.nvmlDeviceGetPcieReplayCounter(handle))),
            nvlinks=self._nvlinks(handle, read),
            **self._fabric(handle, read),
            mig_enabled=None if mig is None else bool(mig[0]),
            persistence_mode=None if persistence is None else bool(persistence),
            vbios_version=read("vbios", lambda: _text(nvml.nvmlDeviceGetVbiosVersion(handle))),
            errors=errors,
        )

    def _fabric(self, handle: Any, read: Callable[[str, Callable[[], Any]], Any]) -> dict[str, Any]:
        """``fabric_state`` and ``fabric_error`` from ``nvmlDeviceGetGpuFabricInfo``;
        nothing where the GPU joins no fabric (``NOT_SUPPORTED``, or the call is absent
        from an older driver)."""
        nvml = self.nvml
        if not hasattr(nvml, "c_nvmlGpuFabricInfo_t"):
            return {}
        info = nvml.c_nvmlGpuFabricInfo_t()
        if (
            read("fabric", lambda: nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info)))
            is None
        ):
            return {}
        state = FABRIC_STATES.get(int(info.state))
        if state is None:
            return {}
        status = int(info.status)
        error = "" if status == 0 else _text(nvml.nvmlErrorString(status))
        return {"fabric_state": state, "fabric_error": error}

    def _nvlinks(
        self, handle: Any, read: Callable[[str, Callable[[], Any]], Any]
    ) -> tuple[NvLinkSample, ...]:
        nvml = self.nvml
        links = []
        for link in range(MAX_NVLINKS):
            state = read("nvlink", functools.partial(nvml.nvmlDeviceGetNvLinkState, handle, link))
            if state is None:
                break

            def counter(kind: int, link: int = link) -> int:
                value = read(
                    "nvlink", lambda: nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, kind)
                )
                return int(value or 0)

            links.append(
                NvLinkSample(
                    link=link,
                    active=bool(state),
                    crc_errors=counter(nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
                    replay_errors=counter(nvml.NVML_NVLINK_ERROR_DL_REPLAY),
                    recovery_errors=counter(nvml.NVML_NVLINK_ERROR_DL_RECOVERY),
                )
            )
        return tuple(links)

    def _nvml_xids(self, timeout_ms: int = 0) -> list[XidEvent]:
        nvml = self.nvml
        events: list[XidEvent] = []
        if self._events is None:
            return events
        while True:
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, timeout_ms)
                timeout_ms = 0
            except nvml.NVMLError_Timeout:
                return events
            except nvml.NVMLError:
                return events
            bus = ""
            with contextlib.suppress(nvml.NVMLError):
                bus = _text(nvml.nvmlDeviceGetPciInfo(data.device).busId)
            events.append(
                XidEvent(
                    code=int(data.eventData), gpu=None, pci_bus_id=bus, message="reported by NVML"
                )
            )

    def wait_for_xid(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a fatal or degraded XID or SXid; events are
        kept for the next :meth:`sample`, so the agent can sweep at once without
        losing them."""
        events: list[XidEvent] = []
        with self._lock:
            released, waits = self._released, self._events is not None
            if not released:
                events = self._nvml_xids(int(timeout * 1000) if waits else 0)
        if released or not waits:
            time.sleep(timeout)
        if released:
            return False  # a reset under way: its Xids are the reset's, not news
        sxids: list[SxidEvent] = []
        if self.kernel_log is not None:
            found = self.kernel_log.read()
            events.extend(found.xids)
            sxids.extend(found.sxids)
        self._pending.extend(events)
        self._pending_sxids.extend(sxids)
        urgent = (FaultClass.FATAL, FaultClass.DEGRADED)
        return any(classify(e.code, e.message).fault_class in urgent for e in events) or any(
            s.rule.fault_class in urgent for s in sxids
        )

    def sample(self) -> NodeSample:
        nvml = self.nvml
        errors: dict[str, str] = {}
        count = nvml.nvmlDeviceGetCount()
        gpus = tuple(self._gpu(index) for index in range(count))
        driver = self._read(errors, "driver", lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        cuda = self._read(errors, "cuda", nvml.nvmlSystemGetCudaDriverVersion_v2)
        xids, self._pending = [*self._pending, *self._nvml_xids()], []
        sxids, self._pending_sxids = self._pending_sxids, []
        if self.kernel_log is not None:
            found = self.kernel_log.read()
            # NVML says 00000000:18:00.0 where the kernel says 0000:18:00: one event
            # reported both ways is one event.
            known = {(x.code, normalize_bus_id(x.pci_bus_id)) for x in xids}
            xids.extend(
                e for e in found.xids if (e.code, normalize_bus_id(e.pci_bus_id)) not in known
            )
            sxids.extend(found.sxids)
            if self.kernel_log.error:
                errors["xid"] = self.kernel_log.error
            if self.kernel_log.partial_reason:
                errors["kernel-log"] = self.kernel_log.partial_reason
        try:
            ports = read_ports(self.sysfs_ib)
        except OSError as error:
            ports = ()
            errors["ib"] = f"cannot read {self.sysfs_ib}: {error.strerror}"
        return NodeSample(
            time=datetime.datetime.now(datetime.UTC),
            gpus=gpus,
            driver_version=driver,
            cuda_version=None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            xids=tuple(xids),
            sxids=tuple(sxids),
            ib_ports=ports,
            errors=errors,
        )

    def release(self) -> None:
        """Free the XID event set and shut NVML down, which closes this process's
        ``/dev/nvidia*`` handles, so that ``nvidia-smi -r`` is not refused as in use.
        The kernel log stays open: it is no GPU device."""
        with self._lock:
            if self._released:
                return
            self._released = True
            self._shutdown()

    def reacquire(self) -> None:
        """Start NVML again after a reset and register for XIDs again; a driver that does
        not answer yet raises :class:`BackendUnavailableError` and stays released. A GPU
        that did not come back is no error here: the next sample reports it (lost, or
        missing from the count), as any GPU that falls off the bus."""
        with self._lock:
            if not self._released:
                return
            try:
                self.nvml.nvmlInit()
            except self.nvml.NVMLError as error:
                raise BackendUnavailableError(f"NVML did not start again: {error}") from None
            self._released = False
            self._events = self._register_xid_events()

    def _shutdown(self) -> None:
        try:
            if self._events is not None:
                self.nvml.nvmlEventSetFree(self._events)
            self._events = None
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def close(self) -> None:
        if self.kernel_log is not None:
            self.kernel_log.close()
        with self._lock:
            if not self._released:
                self._released = True
                self._shutdown()


FABRIC_STATES = {1: "not-started", 2: "in-progress", 3: "completed"}
"""``NVML_GPU_FABRIC_STATE_*``; 0 is ``NOT_SUPPORTED``: no fabric to join."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
