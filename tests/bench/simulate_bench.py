"""Benchmark: how fast ``pitcrew simulate`` runs a Llama 3-sized job at real time scales.

Usage: python tests/bench/simulate_bench.py [--nodes 2112] [--days 54] [--seed 1] [--json]

One run per contender (the baseline and Pitcrew's defaults) of the Llama 3 mix on
a 16,384-GPU job (2,048 of 2,112 nodes) for 54 simulated days, the settings
``pitcrew simulate`` uses by default. Prints each run's CPU seconds (this
process's ``time.process_time``: it travels between machines better than wall
time), its decisions and their CPU time, the job goodput, and the machine's load
average at the start. With ``--json``, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from pitcrew.simulate.run import run
from pitcrew.simulate.settings import DEFAULTS, STOCK, Contender, Settings, default_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=Settings().nodes)
    parser.add_argument("--days", type=float, default=Settings().days)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    settings = Settings(nodes=args.nodes, days=args.days, seed=args.seed)
    load = os.getloadavg()[0]
    figures: dict[str, object] = {
        "nodes": settings.nodes,
        "jobGpus": settings.job_size * settings.gpus_per_node,
        "days": settings.days,
        "load1": round(load, 2),
    }
    for contender in (Contender(STOCK, None), Contender(DEFAULTS, default_spec())):
        started, wall = time.process_time(), time.perf_counter()
        outcome = run(settings, contender)
        figures[contender.name] = {
            "cpuSeconds": round(time.process_time() - started, 2),
            "wallSeconds": round(time.perf_counter() - wall, 2),
            "decisions": outcome.decisions,
            "decideCpuSeconds": round(outcome.decide_cpu_seconds, 2),
            "faults": outcome.faults,
            "interruptions": outcome.interruptions,
            "jobGoodput": round(outcome.job_goodput, 4),
        }
    if args.json:
        print(json.dumps(figures))
        return
    print(
        f"{settings.days:g} days, {figures['jobGpus']} GPUs of job on {settings.nodes} nodes, "
        f"load {load:.2f} at the start"
    )
    for name in (STOCK, DEFAULTS):
        print(f"  {name:9} {figures[name]}")


if __name__ == "__main__":
    main()
