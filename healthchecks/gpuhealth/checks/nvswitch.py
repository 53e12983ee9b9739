"""NVSwitch errors (SXids), judged by the SXid table.

An SXid is about the baseboard's NVLink fabric, not about one GPU: its
results name no GPU, and an SXid is never counted as an XID. Each event is
classified by :func:`gpuhealth.sxid.classify`, which weighs what the line
said of itself (``Fatal``, ``Non-fatal``) against NVIDIA's table.

Fatal and degraded SXids are latched like fatal XIDs, because the driver
logs an SXid once while the switch stays broken: the finding stays until the
node is repaired (:meth:`~gpuhealth.checks.context.Memory.clear_latched`).
They share ``Memory.latched_xids`` under ``(None, code)``: the driver numbers
SXids from 10000 up precisely to tell them from GPU XIDs, so no key collides
with an XID's, and one repair clears both. A fatal finding says so in its
message (``fatal NVSwitch SXid 12020 on nvswitch3 ...``), which is the reason
the node is taken out.

Non-fatal SXids (corrected ECC, link replays) are reported as a warning on
the sweep that read them, one per code, and not latched: the switch
recovered by itself.
"""

from __future__ import annotations

from collections import defaultdict

from gpuhealth.checks.context import CheckContext, result
from gpuhealth.report import CheckResult, CheckStatus, FaultClass
from gpuhealth.samples import SxidEvent

NAME = "sxid"
MESSAGE_LIMIT = 1024
_RANK = {FaultClass.FATAL: 2, FaultClass.DEGRADED: 1}


def _where(event: SxidEvent) -> str:
    switch = event.switch or "NVSwitch"
    link = f" link {event.link}" if event.link is not None else ""
    return f"{switch} (PCI {event.pci_bus_id}){link}"


def _latch(ctx: CheckContext, event: SxidEvent) -> None:
    rule = event.rule
    key = (None, event.code)
    previous = ctx.memory.latched_xids.get(key)
    if previous is not None and _RANK[previous.fault_class] > _RANK[rule.fault_class]:
        return
    said = f"; logged: {event.message}" if event.message else ""
    message = f"{rule.fault_class} NVSwitch SXid {event.code} on {_where(event)}: "
    message += f"{rule.description}{said}"
    if previous is not None and previous.fault_class is rule.fault_class:
        message = previous.message
        if _where(event) not in message:
            message += f"; again on {_where(event)}"
    ctx.memory.latched_xids[key] = result(
        NAME,
        CheckStatus.FAIL,
        observed=event.code,
        fault_class=rule.fault_class,
        action=rule.action,
        message=message[:MESSAGE_LIMIT],
    )


def _watched(events: list[SxidEvent]) -> CheckResult:
    first = events[0]
    where = sorted({_where(e) for e in events})
    message = f"{len(events)} non-fatal NVSwitch SXid {first.code} on {', '.join(where)}: "
    message += first.rule.description
    return result(
        NAME,
        CheckStatus.WARN,
        observed=first.code,
        fault_class=FaultClass.WATCH,
        message=message[:MESSAGE_LIMIT],
    )


def check_sxid(ctx: CheckContext) -> list[CheckResult]:
    watched: dict[int, list[SxidEvent]] = defaultdict(list)
    for event in ctx.sample.sxids:
        if event.rule.fault_class in _RANK:
            _latch(ctx, event)
        else:
            watched[event.code].append(event)
    latched = [r for r in ctx.memory.latched_xids.values() if r.name == NAME]
    results = [*latched, *(_watched(events) for _, events in sorted(watched.items()))]
    return results or [result(NAME, CheckStatus.PASS, message="no NVSwitch SXid events")]
