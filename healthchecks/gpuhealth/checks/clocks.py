"""Clock events (throttling) and thermal margin.

Hardware slowdown, hardware thermal slowdown and the power brake mean the
board itself is slowing the GPU (failing fans, a PSU or a power-brake signal
from the chassis): one GPU running at a fraction of its clocks paces a whole
synchronous job. A short blip is tolerated (``clocks.hw_slowdown_grace_s``);
a reason active for longer is a degraded GPU. Software thermal slowdown is
the driver protecting a hot GPU and is only watched.
"""

from __future__ import annotations

from gpuhealth.checks.context import CheckContext, result, unread
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction
from gpuhealth.samples import ClockEvent

HARDWARE = (ClockEvent.HW_SLOWDOWN, ClockEvent.HW_THERMAL, ClockEvent.HW_POWER_BRAKE)


def check_clock_events(ctx: CheckContext) -> list[CheckResult]:
    grace = ctx.thresholds["clocks.hw_slowdown_grace_s"]
    results = []
    for gpu in ctx.sample.gpus:
        index = gpu.identity.index
        if failed := unread("clock-events", gpu, "clocks"):
            results.append(failed)  # the throttle timers wait for a reading
            continue
        since = ctx.memory.throttle_since
        for reason in ClockEvent:
            key = (index, reason)
            if reason in gpu.clock_events:
                since.setdefault(key, ctx.now)
            else:
                since.pop(key, None)
        active = sorted(r for r in gpu.clock_events if r in HARDWARE)
        if not active:
            if ClockEvent.SW_THERMAL in gpu.clock_events:
                results.append(
                    result(
                        "clock-events",
                        CheckStatus.WARN,
                        gpu=index,
                        fault_class=FaultClass.WATCH,
                        message="software thermal slowdown active",
                    )
                )
            else:
                results.append(result("clock-events", CheckStatus.PASS, gpu=index))
            continue
        longest = max((ctx.now - since[(index, r)]).total_seconds() for r in active)
        names = ", ".join(active)
        if longest >= grace:
            results.append(
                result(
                    "clock-events",
                    CheckStatus.FAIL,
                    gpu=index,
                    observed=round(longest, 1),
                    threshold=grace,
                    unit="s",
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.RESET_GPU,
                    message=f"{names} active for {longest:.0f}s",
                )
            )
        else:
            results.append(
                result(
                    "clock-events",
                    CheckStatus.WARN,
                    gpu=index,
                    observed=round(longest, 1),
                    threshold=grace,
                    unit="s",
                    fault_class=FaultClass.WATCH,
                    message=f"{names} active for {longest:.0f}s (grace {grace:.0f}s)",
                )
            )
    return results


def check_thermal_margin(ctx: CheckContext) -> list[CheckResult]:
    warn = ctx.thresholds["thermal.margin_warn_c"]
    results = []
    for gpu in ctx.sample.gpus:
        index = gpu.identity.index
        if failed := unread("thermal-margin", gpu, "temperature"):
            results.append(failed)
            continue
        slowdown = gpu.slowdown_temp_c or (
            ctx.expect.model.slowdown_temp_c if ctx.expect.model else None
        )
        if gpu.temperature_c is None or slowdown is None:
            results.append(
                result(
                    "thermal-margin",
                    CheckStatus.SKIPPED,
                    gpu=index,
                    message="temperature or slowdown threshold not reported",
                )
            )
            continue
        margin = slowdown - gpu.temperature_c
        status = CheckStatus.WARN if margin < warn else CheckStatus.PASS
        results.append(
            result(
                "thermal-margin",
                status,
                gpu=index,
                observed=round(margin, 1),
                threshold=warn,
                unit="C",
                fault_class=FaultClass.WATCH,
                message=f"{gpu.temperature_c:.0f}C, slowdown at {slowdown:.0f}C",
            )
        )
    return results
