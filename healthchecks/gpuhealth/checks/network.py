"""InfiniBand/RoCE ports for training traffic: state, rate, count, flapping.

A port that is down or trained at a lower rate (200 instead of 400 Gb/s)
slows every collective that crosses it; a port whose ``link_downed`` counter
keeps rising is flapping, which stalls NCCL for seconds each time. Link-down
events are counted over the last hour, not extrapolated: one event between
two sweeps is one event, not "120 an hour".
"""

from __future__ import annotations

from gpuhealth.checks.context import CheckContext, result
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction

PASS, WARN, FAIL = CheckStatus.PASS, CheckStatus.WARN, CheckStatus.FAIL
DEGRADED, NONE = FaultClass.DEGRADED, RecommendedAction.NONE


def check_ib_ports(ctx: CheckContext) -> list[CheckResult]:
    if "ib" in ctx.sample.errors:
        return [result("ib", CheckStatus.ERROR, message=ctx.sample.errors["ib"])]
    ports = ctx.sample.ib_ports
    results = []
    expected = ctx.expect.ib_ports
    if expected is not None and len(ports) < expected:
        results.append(
            result(
                "ib",
                FAIL,
                observed=len(ports),
                threshold=expected,
                unit="ports",
                fault_class=DEGRADED,
                action=RecommendedAction.REBOOT,
                message=f"{len(ports)} of {expected} InfiniBand ports present",
            )
        )
    if not ports:
        return results or [result("ib", CheckStatus.SKIPPED, message="no InfiniBand ports")]
    rate = ctx.thresholds["ib.expected_rate_gbps"]
    flap = ctx.thresholds["ib.link_downed_per_hour_fail"]
    symbol_warn = ctx.thresholds["ib.symbol_errors_per_min_warn"]
    for port in ports:
        name = f"ib {port.name}"
        downs = ctx.increase_per_hour(("ib-down", port.name), port.link_downed)
        symbols = ctx.rate_per_minute(("ib-symbol", port.name), port.symbol_error)
        if port.state != "ACTIVE" or port.phys_state != "LinkUp":
            results.append(
                result(
                    "ib",
                    FAIL,
                    fault_class=DEGRADED,
                    action=NONE,
                    message=f"{name} is {port.state}/{port.phys_state}",
                )
            )
        elif port.rate_gbps < rate:
            results.append(
                result(
                    "ib",
                    FAIL,
                    observed=port.rate_gbps,
                    threshold=rate,
                    unit="Gb/s",
                    fault_class=DEGRADED,
                    action=NONE,
                    message=f"{name} runs at {port.rate_gbps:g} Gb/s",
                )
            )
        elif downs is not None and downs > flap:
            results.append(
                result(
                    "ib",
                    FAIL,
                    observed=downs,
                    threshold=flap,
                    unit="events/h",
                    fault_class=DEGRADED,
                    action=NONE,
                    message=f"{name} is flapping",
                )
            )
        elif symbols is not None and symbols > symbol_warn:
            results.append(
                result(
                    "ib",
                    WARN,
                    observed=round(symbols, 1),
                    threshold=symbol_warn,
                    unit="errors/min",
                    fault_class=FaultClass.WATCH,
                    message=f"{name} has physical-layer symbol errors",
                )
            )
        else:
            results.append(
                result("ib", PASS, observed=port.rate_gbps, unit="Gb/s", message=f"{name} ACTIVE")
            )
    return results
