"""The demo screen, its summary and `pitcrew status` render from plain data."""

from __future__ import annotations

import datetime

from rich.console import Console

from pitcrew.api.gpunode import Phase
from pitcrew.cli import status as fleet_status
from pitcrew.dev.demo.view import InjectedFault, Snapshot, render, summary

NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)


def text(renderable: object) -> str:
    console = Console(width=160, record=True)
    console.print(renderable)
    return console.export_text()


def test_demo_screen_and_summary_say_what_happened() -> None:
    snapshot = Snapshot(
        elapsed=300,
        seed=7,
        phases={"n0": Phase.HEALTHY, "n1": Phase.REMEDIATING, "n2": Phase.SPARE},
        fleet_goodput=0.9612,
        job_goodput=0.9,
        faults=[
            InjectedFault(10, "n1", "faulty GPU", "type=xid code=79", cordoned_after=1.5),
            InjectedFault(20, "-", "software", "training job crashed"),
        ],
        actions=["n1: Cordoned: xid 79"],
    )
    screen = text(render(snapshot))
    assert "96.1 %" in screen
    assert "n1: Cordoned: xid 79" in screen
    assert "GPU reset / reboot / ticket in progress" in screen
    closing = text(summary(snapshot))
    assert "1.5s" in closing
    assert "1 / 1" in closing


def test_status_lists_pools_and_nodes_out_of_service() -> None:
    policies = [
        {
            "metadata": {"name": "h100"},
            "spec": {"safety": {"dryRun": True}},
            "status": {
                "nodes": 3,
                "unhealthy": 1,
                "phases": {"Healthy": 2, "Draining": 1},
                "breaker": {"open": False},
                "goodput": {
                    "target": 0.96,
                    "windows": [
                        {"window": "1h", "ratio": 0.97},
                        {"window": "24h", "ratio": 0.955},
                    ],
                },
            },
        }
    ]
    gpunodes = [
        {"metadata": {"name": "a"}, "status": {"phase": "Healthy"}},
        {
            "metadata": {"name": "b"},
            "status": {
                "phase": "Remediating",
                "policy": "h100",
                "reason": "XidFatal",
                "phaseSince": "2026-12-01T11:30:00Z",
                "remediation": {
                    "action": "reset-gpu",
                    "step": 0,
                    "attempt": 1,
                    "startedAt": "2026-12-01T11:50:00Z",
                },
            },
        },
    ]
    report = fleet_status.build(policies=policies, gpunodes=gpunodes, now=NOW)
    assert [n["node"] for n in report["unhealthy"]] == ["b"]
    assert report["unhealthy"][0]["for"] == "30m"
    assert report["remediations"][0]["for"] == "10m"
    console = Console(width=160, record=True)
    fleet_status.render(report, console)
    table = console.export_text()
    assert "1h 97.0%, 24h 95.5% LOW (96.0%)" in table
    assert "closed (dry run)" in table
    assert "XidFatal" in table


def test_status_reads_pause_where_the_policy_keeps_it() -> None:
    policies = [
        {"metadata": {"name": "paused"}, "spec": {"safety": {"paused": True}}, "status": {}},
        {"metadata": {"name": "running"}, "spec": {"safety": {}}, "status": {}},
    ]
    report = fleet_status.build(policies=policies, gpunodes=[], now=NOW)
    assert {p["pool"]: p["paused"] for p in report["pools"]} == {
        "paused": True,
        "running": False,
    }


def test_the_summary_says_when_the_hung_job_was_restarted_beside_the_watchdog() -> None:
    hang = InjectedFault(90, "n1", "hang", "rank 3 stopped", cordoned_after=66.2)
    snapshot = Snapshot(elapsed=300, seed=7, phases={}, faults=[hang], hang_restarted_after=64.6)
    closing = text(summary(snapshot))
    assert "hang (rank 3 stopped) on n1 at 90s" in closing
    assert "job restarted after 65s" in closing
    assert "66s / 600s" in closing
