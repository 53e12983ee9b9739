"""Driver, CUDA and VBIOS versions; MIG and persistence mode.

Versions are reported, not judged, unless an expected driver is given: the
operator compares them across a pool, where one node that differs (a failed
driver rollout) is the finding. MIG on a training node splits the GPUs and
breaks every job that expects whole GPUs; persistence mode off makes every
job start pay driver initialisation.
"""

from __future__ import annotations

from gpuhealth.checks.context import CheckContext, result
from gpuhealth.report import CheckResult, CheckStatus, FaultClass


def check_versions(ctx: CheckContext) -> list[CheckResult]:
    sample = ctx.sample
    vbios = sorted({g.vbios_version for g in sample.gpus if g.vbios_version})
    facts = (
        f"driver {sample.driver_version or 'unknown'}, CUDA {sample.cuda_version or 'unknown'}"
        f", VBIOS {', '.join(vbios) or 'unknown'}"
    )
    expected = ctx.expect.driver_version
    if expected and sample.driver_version != expected:
        return [
            result(
                "versions",
                CheckStatus.WARN,
                fault_class=FaultClass.WATCH,
                message=f"{facts}; expected driver {expected}",
            )
        ]
    if len(vbios) > 1:
        return [
            result(
                "versions",
                CheckStatus.WARN,
                fault_class=FaultClass.WATCH,
                message=f"{facts}; GPUs on this node run different VBIOS versions",
            )
        ]
    return [result("versions", CheckStatus.PASS, message=facts)]


def check_modes(ctx: CheckContext) -> list[CheckResult]:
    results = []
    for gpu in ctx.sample.gpus:
        index = gpu.identity.index
        problems = []
        if gpu.mig_enabled is not None and gpu.mig_enabled != ctx.expect.mig_enabled:
            problems.append(
                f"MIG {'on' if gpu.mig_enabled else 'off'}, expected "
                f"{'on' if ctx.expect.mig_enabled else 'off'}"
            )
        if gpu.persistence_mode is False:
            problems.append("persistence mode off")
        if problems:
            results.append(
                result(
                    "gpu-modes",
                    CheckStatus.WARN,
                    gpu=index,
                    fault_class=FaultClass.WATCH,
                    message="; ".join(problems),
                )
            )
        else:
            results.append(result("gpu-modes", CheckStatus.PASS, gpu=index))
    return results
