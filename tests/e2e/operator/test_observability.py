"""Metrics, dashboards and alerts against a real Prometheus scraping the real processes.

Prometheus scrapes the operator (both identities the suite starts) and the
simulated agents; the chart's rules are loaded. After a scripted fault the
fleet goodput query must return the expected ratio, and every query of every
dashboard must return data.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pitcrew.client.progress import ProgressReporter
from pitcrew.deploy import dashboards
from pitcrew.dev.stack import SimStack
from support.fixtures import HealthyFleet
from support.fleet import eventually
from support.promserver import RULES, Prometheus, binary

TESTS = Path(__file__).resolve().parents[2] / "prometheus" / "alerts_test.yaml"
FATAL_XID = [{"type": "xid", "gpu": 0, "code": 79}]
# A ladder that cannot succeed: the node stays out of service for the window.
STUCK_LADDER = {
    "ladders": {"fatal": [{"action": "webhook", "timeout": "1h"}]},
    "webhook": {"url": "http://127.0.0.1:9/unreachable"},
}


@pytest.fixture
def prometheus(tmp_path: Path, pitcrew: SimStack) -> Iterator[Prometheus]:
    targets = [
        f"127.0.0.1:{pitcrew.metrics_port(name)}"
        for name in ("operator-a", "operator-b", "sim-agents")
    ]
    server = Prometheus(tmp_path, targets)
    yield server
    server.stop()


def test_alert_rules_are_valid_and_their_unit_tests_pass() -> None:
    subprocess.run([binary("promtool"), "check", "rules", str(RULES)], check=True)
    subprocess.run([binary("promtool"), "test", "rules", TESTS.name], check=True, cwd=TESTS.parent)


def test_goodput_after_a_fault_and_every_dashboard_query_returns_data(
    healthy_fleet: HealthyFleet, workload_namespace: str, prometheus: Prometheus, kubeconfig: str
) -> None:
    fleet = healthy_fleet(size=4, remediation=STUCK_LADDER)
    job = f"{fleet.group}-llm"
    for rank, node in enumerate(fleet.nodes[:2]):
        fleet.pod(workload_namespace, f"llm-{rank}", node, labels={"pitcrew.dev/job": job})
    eventually(
        lambda: all(fleet.pod_running(workload_namespace, f"llm-{r}") for r in range(2)),
        what="the job's pods running",
    )
    reporter = ProgressReporter(
        pod="llm-0",
        namespace=workload_namespace,
        min_interval=0,
        flops_per_step=4e14,
        api=fleet.core,
    )
    # 10 steps of 0.4 PFLOP a second: MFU 0.25 on 16 H100s. Reported for longer than two
    # accounting ticks (5 s), so two ticks see two reports and measure the step rate.
    for step in range(0, 120, 10):
        reporter.step(step)
        time.sleep(1)
    reporter.checkpoint(120)
    time.sleep(6)  # an accounting tick sees the checkpoint

    fleet.inject(fleet.nodes[0], FATAL_XID)
    # The ladder cannot succeed: the node ends Retired. Wait for that last phase, so
    # no phase series starts or stops inside the query window below.
    reason = fleet.wait_phase(fleet.nodes[0], "Retired", timeout=90)["status"]["reason"]
    time.sleep(20)

    pool = f'pool="{fleet.group}"'
    goodput = eventually(
        lambda: prometheus.query(
            f'sum(rate(pitcrew_gpu_seconds_total{{{pool},phase=~"Healthy|Spare"}}[15s]))'
            f" / sum(rate(pitcrew_gpu_seconds_total{{{pool}}}[15s]))"
        ),
        what="the fleet goodput series",
    )
    assert abs(float(goodput[0]["value"][1]) - 0.75) < 0.05  # 3 of 4 nodes in service

    interruptions = prometheus.query(
        f'pitcrew_job_interruptions_total{{training_job="{workload_namespace}/{job}"}}'
    )
    assert [s["metric"]["cause"] for s in interruptions] == ["node-fault"]
    # The scrape's own `job` label is untouched: nothing of Pitcrew's collides with it.
    assert [s["metric"]["job"] for s in interruptions] == ["pitcrew"]
    out = prometheus.query(f'pitcrew_gpunode_info{{node="{fleet.nodes[0]}"}}')
    assert [(s["metric"]["phase"], s["metric"]["reason"]) for s in out] == [("Retired", reason)]
    empty = [e for e in dashboards.expressions(rate_interval="1m") if not prometheus.query(e)]
    assert empty == []

    shown = subprocess.run(
        [sys.executable, "-m", "pitcrew.cli", "status", "--kubeconfig", kubeconfig, "-o", "json"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    report = json.loads(shown.stdout)
    pool = next(p for p in report["pools"] if p["pool"] == fleet.group)
    assert pool["unhealthy"] == 1
    assert pool["goodputTarget"] == 0.96
    first, day = pool["goodput"]
    assert (first["window"], day["window"]) == ("1h", "24h")
    assert 0 < first["ratio"] < 1
    assert fleet.nodes[0] in [n["node"] for n in report["unhealthy"]]
