"""The probe interface and how probe measurements become check results.

A measurement below its floor (from the GPU model table, overridable) fails
with fault class ``degraded``: a slow GPU or fabric is not broken, but it
paces every synchronous job it joins, so it is drained and revalidated. A
probe that cannot run (no PyTorch, no CUDA, a crashed benchmark) reports
``error``, which is never evidence against the GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Protocol

from gpuhealth.errors import GpuhealthError
from gpuhealth.models import GpuModel
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction

SUITES: dict[str, tuple[str, ...]] = {
    "passive": (),
    "quick": ("gemm", "hbm"),
    "full": ("gemm", "hbm", "pcie-bandwidth", "nccl-allreduce"),
}


class ProbeUnavailableError(GpuhealthError, RuntimeError):
    """The probe cannot run here; the message says what is missing."""


class ProbeFailedError(GpuhealthError, RuntimeError):
    """The probe ran and found the hardware wrong (e.g. corrupted all-reduce data)."""


class Probes(Protocol):
    name: str

    def gemm_tflops(self, gpu: int) -> float: ...

    def hbm_gbps(self, gpu: int) -> float: ...

    def h2d_gbps(self, gpu: int) -> float: ...

    def allreduce_busbw_gbps(self) -> float:
        """Single-node all-reduce bus bandwidth over every local GPU."""
        ...


def run_measurement(
    name: str,
    measure: Callable[[], float],
    *,
    floor: float,
    unit: str,
    gpu: int | None,
    action: RecommendedAction,
) -> CheckResult:
    """Run one measurement and judge it against ``floor``."""
    try:
        value = measure()
    except ProbeUnavailableError as error:
        return CheckResult(
            name=name, status=CheckStatus.ERROR, gpu=gpu, unit=unit, message=str(error)
        )
    except ProbeFailedError as error:
        return CheckResult(
            name=name,
            status=CheckStatus.FAIL,
            gpu=gpu,
            unit=unit,
            fault_class=FaultClass.DEGRADED,
            action=action,
            message=str(error),
        )
    except Exception as error:
        return CheckResult(
            name=name,
            status=CheckStatus.ERROR,
            gpu=gpu,
            unit=unit,
            message=f"probe failed: {type(error).__name__}: {error}",
        )
    if value < floor:
        return CheckResult(
            name=name,
            status=CheckStatus.FAIL,
            gpu=gpu,
            observed=round(value, 1),
            threshold=floor,
            unit=unit,
            fault_class=FaultClass.DEGRADED,
            action=action,
            message=f"{value:.1f} {unit} is below the floor",
        )
    return CheckResult(
        name=name,
        status=CheckStatus.PASS,
        gpu=gpu,
        observed=round(value, 1),
        threshold=floor,
        unit=unit,
    )


# probe name -> (Probes method, unit, action when below the floor)
PER_GPU: dict[str, tuple[str, str, RecommendedAction]] = {
    "gemm": ("gemm_tflops", "TFLOPS", RecommendedAction.RESET_GPU),
    "hbm": ("hbm_gbps", "GB/s", RecommendedAction.RESET_GPU),
    "pcie-bandwidth": ("h2d_gbps", "GB/s", RecommendedAction.REBOOT),
}


def probes_not_run(*, suite: str, gpus: Sequence[int], message: str) -> list[CheckResult]:
    """The results :func:`run_probes` would give, each ``error`` with ``message``:
    for a suite that cannot be judged (no floors for an unknown GPU model), so
    every probe the suite promised shows up as not run instead of going missing."""
    wanted = SUITES[suite]
    results = [
        CheckResult(name=name, status=CheckStatus.ERROR, gpu=gpu, unit=unit, message=message)
        for gpu in gpus
        for name, (_, unit, _) in PER_GPU.items()
        if name in wanted
    ]
    if "nccl-allreduce" in wanted:
        results.append(
            CheckResult(
                name="nccl-allreduce", status=CheckStatus.ERROR, unit="GB/s", message=message
            )
        )
    return results


def run_probes(
    probes: Probes,
    *,
    suite: str,
    model: GpuModel,
    gpus: Sequence[int],
    floors: dict[str, float] | None = None,
) -> list[CheckResult]:
    """Run the probes of ``suite`` and judge them against the model's floors."""
    wanted = SUITES[suite]
    floor = {
        "gemm": model.gemm_floor_tflops,
        "hbm": model.hbm_floor_gbps,
        "pcie-bandwidth": model.pcie_floor_gbps,
        "nccl-allreduce": model.nccl_intra_floor_gbps,
    } | (floors or {})
    results = [
        run_measurement(
            name,
            functools.partial(getattr(probes, method), gpu),
            floor=floor[name],
            unit=unit,
            gpu=gpu,
            action=action,
        )
        for gpu in gpus
        for name, (method, unit, action) in PER_GPU.items()
        if name in wanted
    ]
    if "nccl-allreduce" in wanted and len(gpus) < 2:
        # busbw is algbw x 2(n-1)/n: with one GPU nothing crosses a link, and the
        # floor (a whole board's) would fail a healthy single-GPU machine.
        results.append(
            CheckResult(
                name="nccl-allreduce",
                status=CheckStatus.SKIPPED,
                unit="GB/s",
                message="one GPU: an all-reduce moves nothing between GPUs",
            )
        )
    elif "nccl-allreduce" in wanted:
        results.append(
            run_measurement(
                "nccl-allreduce",
                probes.allreduce_busbw_gbps,
                floor=floor["nccl-allreduce"],
                unit="GB/s",
                gpu=None,
                action=RecommendedAction.RESET_GPU,
            )
        )
    return results
