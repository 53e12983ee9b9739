"""Benchmark: the round loop's pool after one change, at thousands of nodes.

Usage: python tests/bench/fleet_bench.py [--nodes 4000] [--changes 200] [--json]

Every round of a burst follows a change of some node's place in its pool: a plan
launched (its intended status), a plan landed, its status write seen by the store.
The loop's pool (``RoundLoop.fleet``) must then be counted again. This benchmark
builds the loop with fakes (:class:`support.shell_fakes.Shell`) over ``--nodes`` nodes
whose statuses are the real agent's report (:func:`fleet_reports.agent_fields`),
settles them Healthy, and times in this process's CPU seconds, per change:

- the loop's pool after it (the kept count, :class:`~pitcrew.core.fleet.Tally`);
- the walk of every member (:func:`~pitcrew.core.fleet.fleet_of`), what the loop did
  before the count was kept;
- the floor: the store taking in the status write the change is (``Store.put``),
  which the operator does whatever it counts.

Each is printed with its ratio to the floor, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleet_reports import agent_fields

from pitcrew.api.gpunode import GPUNodeStatus, Phase
from pitcrew.core.fleet import fleet_of
from pitcrew.core.round import member
from support.shell_fakes import T0, Shell, gpunode, policy_object


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = agent_fields()
    report["checks"]["reportTime"] = report["lastHeartbeat"] = T0.isoformat()
    healthy = GPUNodeStatus.model_validate(report)
    shell = Shell(
        nodes={f"n{i:05d}": healthy for i in range(args.nodes)},
        policy=policy_object(safety={"maxUnhealthy": "50%"}),
    )
    while shell.round():  # every node adopted: Healthy
        pass
    loop, store = shell.rounds, shell.store
    names = sorted(store.nodes)[: args.changes]
    writes = [gpunode(n, healthy.model_copy(update={"phase": Phase.DRAINING})) for n in names]
    kept = walked = floor = 0.0
    for written in writes:
        started = time.process_time()
        store.put("gpunode", written)  # the change: its status write seen
        floor += time.process_time() - started
        started = time.process_time()
        loop.fleet("fleet")
        kept += time.process_time() - started
        started = time.process_time()
        fleet_of(
            (n, member(store.summary(n), loop.intended.get(n)))
            for n in store.nodes
            if store.policies_of(n) == ("fleet",)
        )
        walked += time.process_time() - started
    per = {
        "kept_count_ms": round(1000 * kept / len(names), 3),
        "walk_ms": round(1000 * walked / len(names), 3),
        "floor_put_ms": round(1000 * floor / len(names), 3),
    }
    figures = {
        "nodes": args.nodes,
        "changes": len(names),
        **per,
        "kept_count_to_floor": round(per["kept_count_ms"] / per["floor_put_ms"], 2),
        "walk_to_floor": round(per["walk_ms"] / per["floor_put_ms"], 2),
        "load_1m_5m_15m": [round(x, 2) for x in os.getloadavg()],
    }
    for key, value in figures.items():
        print(f"  {key}: {value}")
    if args.json:
        print(json.dumps({"scenario": "fleet", **figures}))


if __name__ == "__main__":
    main()
