"""Grafana dashboards, as data: each panel is a title, PromQL and a unit.

The JSON in ``charts/pitcrew/dashboards/`` is generated from these tables
(``pitcrew chart``; ``make lint`` fails on drift), and the e2e test runs every
expression below against a real Prometheus scraping a running operator, so
a dashboard cannot ship a query that returns nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

IN_SERVICE = 'phase=~"Healthy|Spare"'
OUT = 'phase!~"Healthy|Spare"'
FLEET_GOODPUT = (
    f"sum by (pool) (rate(pitcrew_gpu_seconds_total{{{IN_SERVICE}}}[$__rate_interval]))"
    " / sum by (pool) (rate(pitcrew_gpu_seconds_total[$__rate_interval]))"
)
JOB_GOODPUT = (
    "sum by (training_job) "
    '(rate(pitcrew_job_seconds_total{category="productive"}[$__rate_interval]))'
    " / sum by (training_job) (rate(pitcrew_job_seconds_total[$__rate_interval]))"
)


@dataclass(frozen=True)
class Panel:
    title: str
    exprs: tuple[str, ...]
    unit: str = "short"
    kind: str = "timeseries"
    """A Grafana panel type; a ``table`` shows the series of an instant query, one a row."""
    legend: str = ""
    description: str = ""


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    panels: tuple[Panel, ...]
    variables: tuple[str, ...] = ()


DASHBOARDS = (
    Dashboard(
        "pitcrew-fleet",
        "Pitcrew / Fleet health and goodput",
        (
            Panel(
                "Fleet goodput (GPU time in service)",
                (FLEET_GOODPUT,),
                "percentunit",
                "stat",
                "{{pool}}",
                "Healthy and spare GPU-seconds over all GPU-seconds of the pool.",
            ),
            Panel("Nodes by phase", ("sum by (phase) (pitcrew_nodes)",), legend="{{phase}}"),
            Panel("GPUs by phase", ("sum by (phase) (pitcrew_gpus)",), legend="{{phase}}"),
            Panel(
                "GPUs out of service, by phase",
                (
                    'sum by (phase) (rate(pitcrew_gpu_seconds_total{phase!~"Healthy|Spare"}'
                    "[$__rate_interval]))",
                ),
                legend="{{phase}}",
                description="GPU-seconds per second outside service: the GPUs lost on average.",
            ),
            Panel(
                "Circuit breaker",
                ("max by (pool) (pitcrew_circuit_breaker_open)",),
                kind="stat",
                legend="{{pool}}",
            ),
            Panel(
                "Detection to quarantine, p50 and p99",
                (
                    "histogram_quantile(0.5, sum by (le) "
                    "(rate(pitcrew_detection_to_quarantine_seconds_bucket[$__rate_interval])))",
                    "histogram_quantile(0.99, sum by (le) "
                    "(rate(pitcrew_detection_to_quarantine_seconds_bucket[$__rate_interval])))",
                ),
                "s",
            ),
            Panel("Operator leader", ("sum(pitcrew_leader)",), kind="stat"),
            Panel(
                "Reconcile errors per second",
                ("sum(rate(pitcrew_reconcile_errors_total[$__rate_interval]))",),
                "ops",
            ),
        ),
    ),
    Dashboard(
        "pitcrew-out",
        "Pitcrew / Who is out and why",
        (
            Panel(
                "Nodes out of service",
                (f"max by (node, pool, phase, reason) (pitcrew_gpunode_info{{{OUT}}})",),
                kind="table",
                description="Every node Pitcrew holds out of service, its phase and why "
                "(status.reason: the failing check or the lifecycle's reason). "
                "`kubectl get gpunode NODE -o yaml` has the message and the history.",
            ),
            Panel(
                "Nodes out, by reason",
                (f"count by (reason) (pitcrew_gpunode_info{{{OUT}}})",),
                legend="{{reason}}",
            ),
            Panel(
                "Nodes out, by phase and pool",
                (f"count by (pool, phase) (pitcrew_gpunode_info{{{OUT}}})",),
                legend="{{pool}} {{phase}}",
            ),
        ),
    ),
    Dashboard(
        "pitcrew-node",
        "Pitcrew / Node detail",
        (
            Panel(
                "Seconds since the agent's last report",
                ('time() - pitcrew_agent_last_heartbeat_timestamp_seconds{node=~"$node"}',),
                "s",
                legend="{{node}}",
            ),
            Panel(
                "GPU temperature",
                ('pitcrew_gpu_temperature_celsius{node=~"$node"}',),
                "celsius",
                legend="{{node}} GPU {{gpu}}",
            ),
            Panel(
                "GPU power",
                ('pitcrew_gpu_power_watts{node=~"$node"}',),
                "watt",
                legend="{{node}} GPU {{gpu}}",
            ),
            Panel(
                "Healthy GPUs",
                ('sum by (node) (pitcrew_gpu_healthy{node=~"$node"})',),
                legend="{{node}}",
            ),
            Panel(
                "Failing checks",
                ('sum by (node, check) (pitcrew_agent_failing_checks{node=~"$node"})',),
                legend="{{node}} {{check}}",
            ),
        ),
        ("node",),
    ),
    Dashboard(
        "pitcrew-remediation",
        "Pitcrew / Remediation activity",
        (
            Panel(
                "Phase transitions per hour",
                ("sum by (to_phase, reason) (increase(pitcrew_phase_transitions_total[1h]))",),
                legend="{{to_phase}} {{reason}}",
            ),
            Panel(
                "Remediations per hour, by action and result",
                ("sum by (action, result) (increase(pitcrew_remediations_total[1h]))",),
                legend="{{action}} {{result}}",
            ),
            Panel(
                "Remediation duration, p90",
                (
                    "histogram_quantile(0.9, sum by (le, action) "
                    "(rate(pitcrew_remediation_duration_seconds_bucket[$__rate_interval])))",
                ),
                "s",
                legend="{{action}}",
            ),
            Panel(
                "Drain duration, p90",
                (
                    "histogram_quantile(0.9, sum by (le) "
                    "(rate(pitcrew_drain_duration_seconds_bucket[$__rate_interval])))",
                ),
                "s",
            ),
            Panel(
                "Evictions per second, by result",
                ("sum by (result) (rate(pitcrew_evictions_total[$__rate_interval]))",),
                "ops",
                legend="{{result}}",
            ),
            Panel(
                "Longest time a node has been in each phase",
                ("max by (phase) (pitcrew_phase_oldest_age_seconds)",),
                "s",
                legend="{{phase}}",
            ),
        ),
    ),
    Dashboard(
        "pitcrew-jobs",
        "Pitcrew / Job goodput",
        (
            Panel("Job goodput", (JOB_GOODPUT,), "percentunit", "stat", "{{training_job}}"),
            Panel(
                "Job MFU",
                ("pitcrew_job_mfu_ratio",),
                "percentunit",
                "stat",
                "{{training_job}}",
                "Achieved model FLOP/s over the peak dense bf16 FLOP/s of the job's GPUs.",
            ),
            Panel(
                "Job time by category",
                (
                    "sum by (training_job, category) "
                    "(rate(pitcrew_job_seconds_total[$__rate_interval]))",
                ),
                "percentunit",
                legend="{{training_job}} {{category}}",
            ),
            Panel(
                "Interruptions per day, by cause",
                ("sum by (training_job, cause) (increase(pitcrew_job_interruptions_total[1d]))",),
                legend="{{training_job}} {{cause}}",
            ),
            Panel(
                "GPUs in use",
                ("sum by (training_job) (pitcrew_job_gpus)",),
                legend="{{training_job}}",
            ),
        ),
    ),
)


HIDDEN = {"Time": True, "Value": True}


def _panel(panel: Panel, index: int) -> dict[str, object]:
    table = {"format": "table", "instant": True} if panel.kind == "table" else {}
    width = 8 if panel.kind == "stat" else 12
    per_row = 24 // width
    return {
        "id": index + 1,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": width, "x": (index % per_row) * width, "y": (index // 2) * 8},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": panel.legend, **table}
            for i, expr in enumerate(panel.exprs)
        ],
        # One row a series, its labels as columns; no time or value column.
        **(
            {"transformations": [{"id": "organize", "options": {"excludeByName": HIDDEN}}]}
            if table
            else {}
        ),
    }


def render(dashboard: Dashboard) -> dict[str, object]:
    variables: list[dict[str, object]] = [
        {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}
    ]
    for name in dashboard.variables:
        variables.append(
            {
                "name": name,
                "type": "query",
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": f"label_values(pitcrew_agent_last_heartbeat_timestamp_seconds, {name})",
                "includeAll": True,
                "multi": True,
                "current": {"text": "All", "value": "$__all"},
            }
        )
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "tags": ["pitcrew", "gpu"],
        "schemaVersion": 39,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": variables},
        "panels": [_panel(p, i) for i, p in enumerate(dashboard.panels)],
    }


def files() -> dict[str, str]:
    return {
        f"{d.uid}.json": json.dumps(render(d), indent=2, sort_keys=True) + "\n" for d in DASHBOARDS
    }


def expressions(*, rate_interval: str = "1m") -> list[str]:
    """Every query of every dashboard, with Grafana's variables filled in."""
    return [
        expr.replace("$__rate_interval", rate_interval).replace('"$node"', '".+"')
        for dashboard in DASHBOARDS
        for panel in dashboard.panels
        for expr in panel.exprs
    ]
