"""GPU presence: count against expectation, and GPUs NVML reports as lost."""

from __future__ import annotations

from gpuhealth.checks.context import CheckContext, result
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction

FAIL, PASS = CheckStatus.FAIL, CheckStatus.PASS


def check_gpu_count(ctx: CheckContext) -> list[CheckResult]:
    visible = sum(1 for gpu in ctx.sample.gpus if not gpu.lost)
    expected = ctx.expect.gpus
    if expected is None:
        return [
            result(
                "gpu-count",
                PASS,
                observed=visible,
                unit="GPUs",
                message=f"{visible} GPUs visible (no expected count set)",
            )
        ]
    if visible < expected:
        return [
            result(
                "gpu-count",
                FAIL,
                observed=visible,
                threshold=expected,
                unit="GPUs",
                fault_class=FaultClass.FATAL,
                action=RecommendedAction.REBOOT,
                message=f"{visible} of {expected} GPUs visible: a GPU is missing",
            )
        ]
    return [result("gpu-count", PASS, observed=visible, threshold=expected, unit="GPUs")]


def check_lost(ctx: CheckContext) -> list[CheckResult]:
    lost = [
        result(
            "gpu-lost",
            FAIL,
            gpu=gpu.identity.index,
            fault_class=FaultClass.FATAL,
            action=RecommendedAction.REBOOT,
            message="NVML reports the GPU as lost (fallen off the bus)",
        )
        for gpu in ctx.sample.gpus
        if gpu.lost
    ]
    return lost or [result("gpu-lost", PASS, message="no GPU reported lost")]
