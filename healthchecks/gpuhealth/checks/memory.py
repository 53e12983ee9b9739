"""GPU memory health: ECC counters, row remapping, retired pages.

Ampere and later GPUs repair uncorrectable errors by remapping rows, which
takes effect at the next GPU reset: a pending remap is a degraded GPU (reset
it when idle); a failed remap, or more than ``remap.uncorrectable_max`` rows,
means the GPU is out of spare rows and must be replaced. Correctable (SBE)
errors matter only as a rate.

Every result of a check carries the check's own name (``ecc``), pass or fail,
so a finding and the pass that replaces it after the repair are the same
series on a dashboard; the message says which counter it was.
"""

from __future__ import annotations

from gpuhealth.checks.context import CheckContext, result, unread
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction
from gpuhealth.samples import GpuSample

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL


def _skipped_or_error(name: str, gpu: GpuSample, read: str) -> CheckResult:
    return unread(name, gpu, read) or result(
        name, CheckStatus.SKIPPED, gpu=gpu.identity.index, message="not reported by this GPU"
    )


def check_ecc(ctx: CheckContext) -> list[CheckResult]:
    """Uncorrectable errors since the driver loaded (fatal), and the correctable rate."""
    results = []
    for gpu in ctx.sample.gpus:
        index = gpu.identity.index
        if gpu.ecc_dbe_volatile is None or gpu.ecc_sbe_aggregate is None:
            results.append(_skipped_or_error("ecc", gpu, "ecc"))
            continue
        findings = []
        dbe_max = ctx.thresholds["ecc.dbe_max"]
        if gpu.ecc_dbe_volatile > dbe_max:
            findings.append(
                result(
                    "ecc",
                    FAIL,
                    gpu=index,
                    observed=gpu.ecc_dbe_volatile,
                    threshold=dbe_max,
                    unit="errors",
                    fault_class=FaultClass.FATAL,
                    action=RecommendedAction.RESET_GPU,
                    message=f"{gpu.ecc_dbe_volatile} uncorrectable ECC errors since driver load",
                )
            )
        rate = ctx.rate_per_minute(("sbe", index), gpu.ecc_sbe_aggregate)
        per_hour = None if rate is None else rate * 60
        warn, fail = (
            ctx.thresholds["ecc.sbe_per_hour_warn"],
            ctx.thresholds["ecc.sbe_per_hour_fail"],
        )
        if per_hour is not None and per_hour > fail:
            findings.append(
                result(
                    "ecc",
                    FAIL,
                    gpu=index,
                    observed=round(per_hour, 1),
                    threshold=fail,
                    unit="errors/h",
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.RESET_GPU,
                    message="correctable ECC error storm",
                )
            )
        elif per_hour is not None and per_hour > warn:
            findings.append(
                result(
                    "ecc",
                    WARN,
                    gpu=index,
                    observed=round(per_hour, 1),
                    threshold=warn,
                    unit="errors/h",
                    fault_class=FaultClass.WATCH,
                    message="correctable ECC errors above the watch rate",
                )
            )
        results.extend(
            findings
            or [
                result(
                    "ecc",
                    PASS,
                    gpu=index,
                    observed=None if per_hour is None else round(per_hour, 1),
                    unit="errors/h",
                    message="no uncorrectable errors; correctable rate shown",
                )
            ]
        )
    return results


def check_row_remap(ctx: CheckContext) -> list[CheckResult]:
    results = []
    limit = ctx.thresholds["remap.uncorrectable_max"]
    for gpu in ctx.sample.gpus:
        index = gpu.identity.index
        if gpu.remap_pending is None or gpu.remap_uncorrectable is None:
            results.append(_skipped_or_error("row-remap", gpu, "remap"))
        elif gpu.remap_failure:
            results.append(
                result(
                    "row-remap",
                    FAIL,
                    gpu=index,
                    fault_class=FaultClass.FATAL,
                    action=RecommendedAction.REPLACE,
                    message="row remapping failed: no spare rows left",
                )
            )
        elif gpu.remap_uncorrectable > limit:
            results.append(
                result(
                    "row-remap",
                    FAIL,
                    gpu=index,
                    observed=gpu.remap_uncorrectable,
                    threshold=limit,
                    unit="rows",
                    fault_class=FaultClass.FATAL,
                    action=RecommendedAction.REPLACE,
                    message="too many rows remapped for uncorrectable errors",
                )
            )
        elif gpu.remap_pending:
            results.append(
                result(
                    "row-remap",
                    FAIL,
                    gpu=index,
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.RESET_GPU,
                    message="row remap pending: takes effect at the next GPU reset",
                )
            )
        else:
            results.append(
                result(
                    "row-remap",
                    PASS,
                    gpu=index,
                    observed=gpu.remap_uncorrectable,
                    threshold=limit,
                    unit="rows",
                )
            )
    return results


def check_retired_pages(ctx: CheckContext) -> list[CheckResult]:
    results = []
    limit = ctx.thresholds["retired_pages.max"]
    for gpu in ctx.sample.gpus:
        index = gpu.identity.index
        if gpu.retired_pages_sbe is None or gpu.retired_pages_dbe is None:
            results.append(_skipped_or_error("retired-pages", gpu, "retired_pages"))
            continue
        total = gpu.retired_pages_sbe + gpu.retired_pages_dbe
        if total > limit:
            results.append(
                result(
                    "retired-pages",
                    FAIL,
                    gpu=index,
                    observed=total,
                    threshold=limit,
                    unit="pages",
                    fault_class=FaultClass.FATAL,
                    action=RecommendedAction.REPLACE,
                    message="retired page limit exceeded",
                )
            )
        elif gpu.retired_pages_pending:
            results.append(
                result(
                    "retired-pages",
                    FAIL,
                    gpu=index,
                    observed=total,
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.RESET_GPU,
                    message="page retirement pending until the next GPU reset",
                )
            )
        else:
            results.append(
                result(
                    "retired-pages", PASS, gpu=index, observed=total, threshold=limit, unit="pages"
                )
            )
    return results
