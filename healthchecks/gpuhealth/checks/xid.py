"""XID events, classified by the XID table, latched and counted.

Each event is classified by :mod:`gpuhealth.xid`. The driver logs an XID
once, but the report must keep saying so for as long as it matters:

- fatal and degraded findings are latched (see
  :class:`~gpuhealth.checks.context.Memory`) until the node is repaired;
- application and watch XIDs are counted per GPU over
  ``xid.app_repeat_window_s`` and reported while inside the window, as a
  warning; ``xid.app_repeat_count`` application XIDs on one GPU within the
  window are no longer the job's fault and escalate to ``degraded``.

So consecutive reports are stable, which is also what lets the agent write
to the apiserver only when something changed.

Kernel-log lines the parser could not read (``NodeSample.errors["kernel-log"]``)
are reported as a ``kernel-log`` warning next to the XID verdict: the events
of every other line were judged, but an XID may hide in the unread ones.
NVSwitch SXids are judged by :mod:`gpuhealth.checks.nvswitch`, never here;
their latched findings share ``Memory.latched_xids`` and are left to it.
"""

from __future__ import annotations

import datetime
from collections import deque

from gpuhealth import xid
from gpuhealth.checks.context import CheckContext, result
from gpuhealth.parsers.kmsg import normalize_bus_id
from gpuhealth.report import CheckResult, CheckStatus, FaultClass, RecommendedAction
from gpuhealth.samples import XidEvent


def _gpu_index(ctx: CheckContext, bus_id: str) -> int | None:
    wanted = normalize_bus_id(bus_id)
    for gpu in ctx.sample.gpus:
        if normalize_bus_id(gpu.identity.pci_bus_id) == wanted:
            return gpu.identity.index
    return None


def _counted(ctx: CheckContext, window: datetime.timedelta, repeat: int) -> list[CheckResult]:
    results = []
    for gpu, seen in sorted(ctx.memory.app_xids.items(), key=lambda kv: str(kv[0])):
        while seen and ctx.now - seen[0][0] > window:
            seen.popleft()
        if not seen:
            continue
        codes = sorted({code for _, code in seen})
        application = sum(
            1 for _, code in seen if xid.classify(code).fault_class is FaultClass.APPLICATION
        )
        summary = f"{len(seen)} XID(s) {codes} within {window}"
        if application >= repeat:
            results.append(
                result(
                    "xid",
                    CheckStatus.FAIL,
                    gpu=gpu,
                    observed=application,
                    threshold=repeat,
                    unit="events",
                    fault_class=FaultClass.DEGRADED,
                    action=RecommendedAction.RESET_GPU,
                    message=f"{summary}: repeated application XIDs escalate",
                )
            )
        else:
            kind = FaultClass.APPLICATION if application else FaultClass.WATCH
            results.append(
                result(
                    "xid",
                    CheckStatus.WARN,
                    gpu=gpu,
                    observed=len(seen),
                    unit="events",
                    fault_class=kind,
                    action=xid.classify(seen[-1][1]).action,
                    message=summary,
                )
            )
    return results


def _attribution(event: XidEvent) -> str:
    """`` (MIG GI 2/CI 0, pid 1234 python)`` for what the driver said of the culprit."""
    parts = []
    if event.gpu_instance is not None:
        instance = f"MIG GI {event.gpu_instance}"
        if event.compute_instance is not None:
            instance += f"/CI {event.compute_instance}"
        parts.append(instance)
    if event.pid is not None:
        parts.append(f"pid {event.pid}" + (f" {event.process}" if event.process else ""))
    return f" ({', '.join(parts)})" if parts else ""


def check_xid(ctx: CheckContext) -> list[CheckResult]:
    window = datetime.timedelta(seconds=ctx.thresholds["xid.app_repeat_window_s"])
    repeat = int(ctx.thresholds["xid.app_repeat_count"])
    for event in ctx.sample.xids:
        gpu = event.gpu if event.gpu is not None else _gpu_index(ctx, event.pci_bus_id)
        rule = xid.classify(event.code, event.message)
        if rule.fault_class in (FaultClass.APPLICATION, FaultClass.WATCH):
            ctx.memory.app_xids.setdefault(gpu, deque()).append((event.time or ctx.now, event.code))
        else:
            ctx.memory.latched_xids[(gpu, event.code)] = result(
                "xid",
                CheckStatus.FAIL,
                gpu=gpu,
                observed=event.code,
                fault_class=rule.fault_class,
                action=rule.action,
                message=f"XID {event.code}: {rule.description}{_attribution(event)}",
            )
    latched = [r for r in ctx.memory.latched_xids.values() if r.name == "xid"]
    results = [*latched, *_counted(ctx, window, repeat)]
    if "xid" in ctx.sample.errors:
        results.append(result("xid-source", CheckStatus.ERROR, message=ctx.sample.errors["xid"]))
    results = results or [result("xid", CheckStatus.PASS, message="no XID events")]
    if "kernel-log" in ctx.sample.errors:
        results.append(
            result(
                "kernel-log",
                CheckStatus.WARN,
                fault_class=FaultClass.WATCH,
                message=ctx.sample.errors["kernel-log"],
            )
        )
    return results
