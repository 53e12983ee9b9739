"""The demo's summary quotes what Pitcrew adds to a stock cluster, from the simulator."""

from __future__ import annotations

import time

from rich.console import Console

from pitcrew.api.gpunode import Phase
from pitcrew.dev.demo.simulated import SimulatedGain, simulate_gain
from pitcrew.dev.demo.view import Snapshot, summary

SNAPSHOT = Snapshot(elapsed=600, seed=7, phases={"n0": Phase.HEALTHY})
GAIN = SimulatedGain(
    nodes=32, job_nodes=26, spares=2, days=54, seed=7, stock=0.9659, pitcrew=0.9667
)


def text(renderable: object) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_summary_quotes_the_gain_over_a_stock_cluster_at_both_sizes() -> None:
    closing = text(summary(SNAPSHOT, simulated=GAIN))
    assert "simulated (pitcrew simulate), Llama 3 mix, 54 days" in closing
    assert "26-node job of 32, 2 spares, seed 7" in closing
    assert "96.6 % / 96.7 %" in closing
    assert "Pitcrew over a stock cluster" in closing
    assert "stock cluster: the NVIDIA device plugin's health check" in closing
    assert "+0.08 pts" in closing
    assert "the same at Llama 3's size (2,048-node job)" in closing
    assert "figures in docs/benchmarks.md" in closing


def test_the_summary_without_a_simulation_leaves_the_rows_out() -> None:
    assert "stock cluster" not in text(summary(SNAPSHOT))


def test_the_demo_fleet_simulates_fast_on_the_same_faults() -> None:
    started = time.process_time()
    gain = simulate_gain(nodes=32, job_nodes=26, spares=2, seed=7, days=10)
    assert time.process_time() - started < 5
    assert (gain.nodes, gain.job_nodes, gain.spares, gain.days) == (32, 26, 2, 10)
    assert 0 < gain.stock <= 1
    assert 0 < gain.pitcrew <= 1
    assert gain.gain == gain.pitcrew - gain.stock
    assert gain == simulate_gain(nodes=32, job_nodes=26, spares=2, seed=7, days=10)
