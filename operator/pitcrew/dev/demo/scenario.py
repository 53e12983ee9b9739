"""The demo's fault schedule: the published failure mix, compressed in time, seeded.

Meta's Llama 3 405B pre-training run (54 days on 16,384 H100s) had 419
unexpected interruptions: 30.1 % faulty GPUs, 17.2 % HBM, 12.9 % software
(the job itself), 8.4 % network, 8.1 % host (the remaining 23 % spread over
GPU SRAM, GPU system processor, silent data corruption, power and others,
drawn here as "other GPU" faults). Each category maps to faults from the
gpuhealth vocabulary (docs/faults.md); software failures crash the training
job without touching a node. Arrivals are a Poisson process; the same seed
gives the same schedule, so two policies can be compared on the same faults.
Beside the mix, one straggler at a fixed time (``slow-gemm``), so every demo
shows the job's own step times finding a node no health check can.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

Fault = dict[str, Any]

MIX: tuple[tuple[str, float, tuple[Fault, ...]], ...] = (
    (
        "faulty GPU",
        30.1,
        (
            {"type": "xid", "gpu": 0, "code": 79},
            {"type": "xid", "gpu": 0, "code": 119},
            {"type": "gpu-missing", "gpu": 0},
        ),
    ),
    (
        "HBM",
        17.2,
        (
            {"type": "ecc-dbe", "gpu": 0, "count": 1},
            {"type": "row-remap-failure", "gpu": 0},
            {"type": "ecc-sbe-storm", "gpu": 0, "per_minute": 600},
        ),
    ),
    ("software", 12.9, ()),
    (
        "network",
        8.4,
        (
            {"type": "ib-port-down", "port": "mlx5_0/1"},
            {"type": "ib-flapping", "port": "mlx5_0/1", "per_hour": 30},
            {"type": "nvlink-down", "gpu": 0, "link": 3},
        ),
    ),
    (
        "host",
        8.1,
        (
            {"type": "pcie-downtrain", "gpu": 0, "gen": 3, "width": 8},
            {"type": "thermal-slowdown", "gpu": 0},
            {"type": "power-brake", "gpu": 0},
        ),
    ),
    (
        "other GPU",
        23.3,
        (
            {"type": "xid", "gpu": 0, "code": 48},
            {"type": "nvlink-crc-storm", "gpu": 0, "link": 1},
            {"type": "xid", "gpu": 0, "code": 74},
        ),
    ),
)
SOFTWARE = "software"
HANG = "hang"
"""One rank of the job freezes for good (a GPU driver stuck in the kernel), its pods
running: the others wait in their next collective until Pitcrew, or the NCCL watchdog,
acts."""
STRAGGLER = "straggler"
STRAGGLER_FAULT: Fault = {"type": "slow-gemm", "gpu": 3, "factor": 1.5}
"""A GPU whose matrix units run at two thirds of their speed (a bad power stage, a
clock stuck low): no passive check sees it, every step of a synchronous job waits
for it. Only the job's own step times, or an active GEMM probe, find it."""


@dataclass(frozen=True)
class ScheduledFault:
    at: float
    """Seconds after the start."""
    category: str
    fault: Fault | None
    """None for a software failure: the job crashes, no node is at fault."""
    pick: float
    """Uniform in [0, 1): which node (of those running the job at that time) it hits."""


def schedule(
    *,
    seed: int,
    duration: float,
    mean_interval: float,
    straggler_at: float | None = None,
    hang_at: float | None = None,
) -> list[ScheduledFault]:
    """Faults in the first ``duration`` seconds, one every ``mean_interval`` on average,
    a straggler at ``straggler_at`` seconds (on the node in the middle of the job) and a
    hang at ``hang_at`` (rank 0 freezes)."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible simulation, not a secret
    weights = [w for _, w, _ in MIX]
    faults: list[ScheduledFault] = []
    at = rng.expovariate(1 / mean_interval)
    while at < duration:
        category, _, choices = rng.choices(MIX, weights=weights)[0]
        fault = dict(rng.choice(choices)) if choices else None
        if fault is not None and "gpu" in fault:
            fault["gpu"] = rng.randrange(8)
        faults.append(ScheduledFault(at, category, fault, rng.random()))
        at += rng.expovariate(1 / mean_interval)
    if straggler_at is not None and straggler_at < duration:
        faults.append(ScheduledFault(straggler_at, STRAGGLER, dict(STRAGGLER_FAULT), 0.5))
    if hang_at is not None and hang_at < duration:
        faults.append(ScheduledFault(hang_at, HANG, None, 0.5))
    faults.sort(key=lambda f: f.at)
    return faults
