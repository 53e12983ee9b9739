"""``pitcrew status``: the fleet at a glance, from the cluster's own objects.

Everything comes from GPUHealthPolicy and GPUNode status (the operator keeps
the goodput of each of the policy's windows in its status), so it works on any
cluster Pitcrew runs in, with or without Prometheus. :func:`build` is pure;
the CLI lists the objects and prints the table, JSON or YAML.
"""

from __future__ import annotations

import datetime
from typing import Any

from rich.console import Console, Group
from rich.table import Table

from pitcrew.api.gpunode import Phase
from pitcrew.api.vocabulary import SETTLED


def _since(stamp: str | None, now: datetime.datetime) -> str:
    if not stamp:
        return ""
    moment = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    seconds = int((now - moment).total_seconds())
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def build(
    *, policies: list[dict[str, Any]], gpunodes: list[dict[str, Any]], now: datetime.datetime
) -> dict[str, Any]:
    pools = []
    for policy in sorted(policies, key=lambda p: p["metadata"]["name"]):
        status = policy.get("status") or {}
        spec = policy.get("spec") or {}
        pools.append(
            {
                "pool": policy["metadata"]["name"],
                "nodes": status.get("nodes", 0),
                "unhealthy": status.get("unhealthy", 0),
                "phases": status.get("phases", {}),
                "breakerOpen": bool((status.get("breaker") or {}).get("open")),
                "breakerMessage": (status.get("breaker") or {}).get("message", ""),
                "dryRun": bool((spec.get("safety") or {}).get("dryRun")),
                "paused": bool((spec.get("safety") or {}).get("paused")),
                "goodput": (status.get("goodput") or {}).get("windows", []),
                "goodputTarget": (status.get("goodput") or {}).get("target"),
            }
        )
    unhealthy = []
    remediations = []
    for item in sorted(gpunodes, key=lambda g: g["metadata"]["name"]):
        status = item.get("status") or {}
        phase = status.get("phase", Phase.PENDING)
        if phase in SETTLED:
            continue
        name = item["metadata"]["name"]
        unhealthy.append(
            {
                "node": name,
                "pool": status.get("policy", ""),
                "phase": phase,
                "reason": status.get("reason", ""),
                "message": status.get("message", ""),
                "since": status.get("phaseSince"),
                "for": _since(status.get("phaseSince"), now),
            }
        )
        remediation = status.get("remediation")
        if phase == Phase.REMEDIATING and remediation:
            remediations.append(
                {
                    "node": name,
                    "action": remediation.get("action"),
                    "step": remediation.get("step"),
                    "attempt": remediation.get("attempt"),
                    "startedAt": remediation.get("startedAt"),
                    "for": _since(remediation.get("startedAt"), now),
                    "error": remediation.get("error", ""),
                }
            )
    return {"pools": pools, "unhealthy": unhealthy, "remediations": remediations}


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _goodput(windows: list[dict[str, Any]], target: float | None) -> str:
    """``1h 97.0%, 24h 95.5% (96.0%)``: each window, then the target; a window below
    the target is marked."""
    parts = []
    for window in windows:
        ratio = window.get("ratio")
        low = ratio is not None and target is not None and ratio < target
        parts.append(f"{window.get('window')} {_percent(ratio)}{' LOW' if low else ''}")
    text = ", ".join(parts) or "-"
    return f"{text} ({_percent(target)})" if target is not None else text


def render(report: dict[str, Any], console: Console) -> None:
    pools = Table(title="Pools", title_justify="left")
    for column in ("pool", "nodes", "unhealthy", "phases", "breaker", "goodput (target)"):
        pools.add_column(column)
    for pool in report["pools"]:
        phases = ", ".join(f"{k} {v}" for k, v in sorted(pool["phases"].items()))
        breaker = "OPEN" if pool["breakerOpen"] else "closed"
        if pool["dryRun"]:
            breaker += " (dry run)"
        if pool["paused"]:
            breaker += " (paused)"
        pools.add_row(
            pool["pool"],
            str(pool["nodes"]),
            str(pool["unhealthy"]),
            phases,
            breaker,
            _goodput(pool["goodput"], pool["goodputTarget"]),
        )
    nodes = Table(title="Nodes out of service", title_justify="left")
    for column in ("node", "pool", "phase", "for", "reason", "message"):
        nodes.add_column(column, overflow="fold")
    for node in report["unhealthy"]:
        nodes.add_row(
            node["node"], node["pool"], node["phase"], node["for"], node["reason"], node["message"]
        )
    repairs = Table(title="Active remediations", title_justify="left")
    for column in ("node", "action", "step", "attempt", "for", "error"):
        repairs.add_column(column, overflow="fold")
    for rung in report["remediations"]:
        repairs.add_row(
            rung["node"],
            str(rung["action"]),
            str(rung["step"]),
            str(rung["attempt"]),
            rung["for"],
            rung["error"],
        )
    parts: list[Any] = [pools]
    parts.append(nodes if report["unhealthy"] else "No node is out of service.")
    if report["remediations"]:
        parts.append(repairs)
    console.print(Group(*parts))
