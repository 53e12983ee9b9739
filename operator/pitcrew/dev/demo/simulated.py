"""The demo's fleet beside a stock GPU cluster, in the goodput simulator.

The demo runs one cluster, with Pitcrew, for minutes: it cannot show what Pitcrew
adds to a cluster that runs without it. At the end it asks ``pitcrew simulate`` for
a fleet of its own size: the demo's pool and job, the Llama 3 failure mix, 54
simulated days, a stock cluster (the NVIDIA device plugin's health check,
Kubernetes' NotReady eviction, people for the rest) beside Pitcrew's defaults with
the demo's spares, on the same faults. Two runs and no attribution take about a
second of CPU at 32 nodes, so the summary waits for them.

A 26-node job meets only a few interruptions in 54 days, so at the demo's size the
gain is small and moves with the seed; the summary points at the figure measured at
Llama 3's size (a 2,048-node job, docs/benchmarks.md), which takes minutes to run.
"""

from __future__ import annotations

from dataclasses import dataclass

from pitcrew.simulate.compare import compare
from pitcrew.simulate.settings import (
    DEFAULTS,
    STOCK,
    Contender,
    Settings,
    default_spec,
    with_spares,
)

DAYS = 54.0
"""Simulated days: the length of Meta's Llama 3 405B snapshot, as ``pitcrew simulate``."""


@dataclass(frozen=True)
class SimulatedGain:
    """Job goodput of the demo's fleet, simulated, on a stock cluster and with Pitcrew."""

    nodes: int
    job_nodes: int
    spares: int
    days: float
    seed: int
    stock: float
    pitcrew: float

    @property
    def gain(self) -> float:
        """Points of job goodput (a fraction) Pitcrew adds to the stock cluster."""
        return self.pitcrew - self.stock


def simulate_gain(
    *, nodes: int, job_nodes: int, spares: int, seed: int, days: float = DAYS
) -> SimulatedGain:
    """Run the stock cluster and Pitcrew's defaults with ``spares`` on the same faults."""
    settings = Settings(nodes=nodes, job_nodes=job_nodes, days=days, seed=seed)
    contenders = [
        Contender(STOCK, None),
        Contender(DEFAULTS, with_spares(default_spec(), spares)),
    ]
    outcomes = compare(settings, contenders, attribution=False).outcomes
    return SimulatedGain(
        nodes=nodes,
        job_nodes=job_nodes,
        spares=spares,
        days=days,
        seed=seed,
        stock=outcomes[STOCK].job_goodput,
        pitcrew=outcomes[DEFAULTS].job_goodput,
    )
