"""A stand-in for ``pynvml`` (nvidia-ml-py): two GPUs, errors on demand, and a count of
``nvmlInit``/``nvmlShutdown``, for unit tests of the NVML backend and the agent."""

from __future__ import annotations

import types
from typing import Any


class FakeNvmlError(Exception):
    pass


class NotSupportedError(FakeNvmlError):
    pass


class GpuIsLostError(FakeNvmlError):
    pass


class UnknownError(FakeNvmlError):
    pass


class NvmlTimeoutError(FakeNvmlError):
    pass


class UninitializedError(FakeNvmlError):
    pass


def fake_pynvml(*, lost: set[int], broken_ecc: set[int]) -> types.ModuleType:
    """A stand-in for pynvml with two GPUs, for unit tests of the error handling. It
    counts ``nvmlInit`` and ``nvmlShutdown`` (``inits``, ``shutdowns``); while NVML is
    shut down a device call fails as pynvml's does (Uninitialized); ``gpus`` is the
    device count and ``init_fails`` makes ``nvmlInit`` fail (a driver not back yet)."""
    nvml: Any = types.ModuleType("pynvml")
    nvml.inits = nvml.shutdowns = 0
    nvml.gpus, nvml.init_fails = 2, False
    nvml.NVMLError, nvml.NVMLError_NotSupported = FakeNvmlError, NotSupportedError
    nvml.NVMLError_GpuIsLost, nvml.NVMLError_Timeout = GpuIsLostError, NvmlTimeoutError
    for i, name in enumerate(
        [
            "nvmlClocksEventReasonHwSlowdown",
            "nvmlClocksEventReasonHwThermalSlowdown",
            "nvmlClocksEventReasonHwPowerBrakeSlowdown",
            "nvmlClocksEventReasonSwThermalSlowdown",
        ]
    ):
        setattr(nvml, name, 1 << i)
    for name in [
        "NVML_MEMORY_ERROR_TYPE_CORRECTED",
        "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
        "NVML_VOLATILE_ECC",
        "NVML_AGGREGATE_ECC",
        "NVML_TEMPERATURE_GPU",
        "NVML_CLOCK_SM",
        "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN",
        "nvmlEventTypeXidCriticalError",
        "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
        "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",
        "NVML_NVLINK_ERROR_DL_CRC_FLIT",
        "NVML_NVLINK_ERROR_DL_REPLAY",
        "NVML_NVLINK_ERROR_DL_RECOVERY",
    ]:
        setattr(nvml, name, 0)

    def init() -> None:
        if nvml.init_fails:
            raise UnknownError("Driver Not Loaded")
        nvml.inits += 1

    def shutdown() -> None:
        if nvml.inits <= nvml.shutdowns:
            raise UninitializedError("Uninitialized")
        nvml.shutdowns += 1

    def count() -> int:
        if nvml.inits <= nvml.shutdowns:
            raise UninitializedError("Uninitialized")
        return int(nvml.gpus)

    def handle(index: int) -> int:
        if nvml.inits <= nvml.shutdowns:
            raise UninitializedError("Uninitialized")
        if index in lost:
            raise GpuIsLostError("GPU is lost")
        return index

    def not_supported(*_: Any) -> Any:
        raise NotSupportedError("Not Supported")

    def ecc(h: int, *_: Any) -> int:
        if h in broken_ecc:
            raise UnknownError("UnknownError Error")
        return 0

    nvml.nvmlInit, nvml.nvmlShutdown, nvml.nvmlDeviceGetCount = init, shutdown, count
    nvml.nvmlDeviceGetHandleByIndex = handle
    nvml.nvmlEventSetCreate = not_supported
    nvml.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=f"00000000:{h:02X}:00.0")
    nvml.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    nvml.nvmlDeviceGetName = lambda h: "NVIDIA H100 80GB HBM3"
    nvml.nvmlDeviceGetSerial = lambda h: f"S{h}"
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 2  # hw thermal
    nvml.nvmlDeviceGetTotalEccErrors = ecc
    nvml.nvmlDeviceGetRemappedRows = lambda h: (0, 0, 0, 0)
    nvml.nvmlDeviceGetRetiredPages = not_supported
    nvml.nvmlDeviceGetRetiredPagesPendingStatus = not_supported
    nvml.nvmlDeviceGetPowerUsage = lambda h: 312000
    nvml.nvmlDeviceGetClockInfo = lambda h, clock: 1980
    nvml.nvmlDeviceGetMigMode = lambda h: (0, 0)
    nvml.nvmlDeviceGetPersistenceMode = lambda h: 1
    nvml.nvmlDeviceGetTemperature = lambda h, s: 41
    nvml.nvmlDeviceGetTemperatureThreshold = lambda h, s: 87
    nvml.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    nvml.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    nvml.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    nvml.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    nvml.nvmlDeviceGetPcieReplayCounter = lambda h: 0
    nvml.nvmlDeviceGetNvLinkState = lambda h, link: 1 if link < 18 else not_supported()
    nvml.nvmlDeviceGetNvLinkErrorCounter = lambda h, link, kind: 0
    nvml.nvmlDeviceGetVbiosVersion = lambda h: b"96.00.99.00.01"
    nvml.nvmlSystemGetDriverVersion = lambda: "560.35.03"
    nvml.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12060
    return nvml
