"""Benchmark: how fast ``pitcrew simulate`` runs a Llama 3-sized job, and what it cannot go under.

Usage: python tests/bench/simulate_bench.py [--nodes 2112 16384] [--days 54] [--seed 1]
       [--contenders stock defaults] [--command] [--jobs N] [--json]

One run per pool size and contender of the Llama 3 mix for 54 simulated days in the
realistic world, the settings ``pitcrew simulate`` uses by default (the job is the pool
less 3 %: 2,048 of 2,112 nodes, 15,892 of 16,384). Each run's CPU seconds (this
process's ``time.process_time``: it travels between machines better than wall time)
are set against a floor measured in the same process right after it:

- the clock: as many events as the run ran, pushed onto and popped off the simulator's
  own event queue with a callback that does nothing;
- the decisions: the CPU time of the operator's rounds (``decide_round``: the lifecycle
  and its pool), which the run measures itself.

The ratio (run over floor) is what the simulator adds: the world, the job, the ledgers.
``--command`` also times the whole default ``pitcrew simulate`` (people, stock, the
defaults and the runs without each lever) at the first size, ``--jobs`` at once. The
machine's load average (``os.getloadavg``) is printed at the start and the end: on a
shared machine it moves the figures more than anything measured here; each run's
``load1`` is the same at its start and its end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import time

from pitcrew.simulate.clock import Clock
from pitcrew.simulate.compare import compare
from pitcrew.simulate.run import run
from pitcrew.simulate.settings import (
    DEFAULTS,
    STOCK,
    Contender,
    Settings,
    baselines,
    default_spec,
)

CONTENDERS = {STOCK: Contender(STOCK, None), DEFAULTS: Contender(DEFAULTS, default_spec())}


def clock_floor(events: int, horizon: float) -> float:
    """CPU seconds to run ``events`` events that do nothing through the simulator's clock."""
    rng = random.Random(0)  # noqa: S311 - event times, not secrets
    when = [rng.random() * horizon for _ in range(events)]
    clock = Clock()
    started = time.process_time()
    for at in when:
        clock.at(at, _nothing)
    clock.run(horizon)
    return time.process_time() - started


def _nothing() -> None:
    """An event with no work."""


def one_run(settings: Settings, contender: Contender) -> dict[str, object]:
    load = os.getloadavg()[0]
    started, wall = time.process_time(), time.perf_counter()
    outcome = run(settings, contender)
    cpu = time.process_time() - started
    wall = time.perf_counter() - wall
    heap = clock_floor(outcome.events, settings.seconds)
    floor = heap + outcome.decide_cpu_seconds
    return {
        "load1": [round(load, 2), round(os.getloadavg()[0], 2)],
        "cpuSeconds": round(cpu, 2),
        "wallSeconds": round(wall, 2),
        "events": outcome.events,
        "clockFloorSeconds": round(heap, 2),
        "decisions": outcome.decisions,
        "decideCpuSeconds": round(outcome.decide_cpu_seconds, 2),
        "floorSeconds": round(floor, 2),
        "overFloor": round(cpu / floor, 1) if floor > 0 else None,
        "faults": outcome.faults,
        "interruptions": outcome.interruptions,
        "jobGoodput": round(outcome.job_goodput, 4),
    }


def whole_command(settings: Settings, jobs: int) -> dict[str, object]:
    """The default ``pitcrew simulate`` (with its attribution runs), ``jobs`` at once."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started, wall = time.process_time(), time.perf_counter()
    comparison = compare(
        settings, [*baselines(), CONTENDERS[DEFAULTS]], attribution=True, jobs=jobs
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    children = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "load1": [round(load, 2), round(os.getloadavg()[0], 2)],
        "jobs": jobs,
        "policies": len(comparison.outcomes),
        "wallSeconds": round(time.perf_counter() - wall, 2),
        "cpuSeconds": round(time.process_time() - started + children, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[Settings().nodes, 16384])
    parser.add_argument("--days", type=float, default=Settings().days)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--contenders", nargs="+", choices=sorted(CONTENDERS), default=[STOCK, DEFAULTS]
    )
    parser.add_argument("--command", action="store_true")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures: dict[str, object] = {"days": args.days, "load1Start": os.getloadavg()[0]}
    for nodes in args.nodes:
        settings = Settings(nodes=nodes, days=args.days, seed=args.seed)
        size = {"jobGpus": settings.job_size * settings.gpus_per_node}
        for name in args.contenders:
            size[name] = one_run(settings, CONTENDERS[name])
            if not args.json:
                print(f"{nodes} nodes, {name}: {size[name]}", flush=True)
        figures[str(nodes)] = size
    if args.command:
        settings = Settings(nodes=args.nodes[0], days=args.days, seed=args.seed)
        figures["command"] = whole_command(settings, args.jobs)
        if not args.json:
            print(f"pitcrew simulate at {args.nodes[0]} nodes: {figures['command']}")
    figures["load1End"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(figures))
    else:
        start, end = figures["load1Start"], figures["load1End"]
        print(f"load average {start:.2f} at the start, {end:.2f} at the end")


if __name__ == "__main__":
    main()
