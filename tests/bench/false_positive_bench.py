"""Benchmark: a healthy, noisy fleet for a simulated day: nodes taken out, writes per hour.

Usage: python tests/bench/false_positive_bench.py [--nodes 500] [--hours 24]
       [--interval 30] [--heartbeat 300] [--workers 2] [--seed 0] [--json]

Every node is a real :class:`~pitcrew.node.agent.AgentCore` over the noisy
simulated backend (default noise: temperatures walk, power and clocks
follow load, correctable counters tick, NVML fails a read or a whole sweep
now and then, slow calls), swept every ``--interval`` simulated seconds on a
virtual clock. Each status write the agent makes is recorded instead of sent
to an apiserver (the apiserver is not what this measures) and handed, merged
into the node's GPUNode status as server-side apply would, to the operator's
own ``lifecycle.decide`` with a default GPUHealthPolicy: a node that leaves
Healthy is a false positive, since no fault was injected.

Goals: 0 nodes taken out; at most 12 writes per node per hour at a 5-minute
heartbeat (there are no real changes to add). Prints a table and, with
``--json``, one JSON line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.models import get_model
from gpuhealth.runner import Checker
from pitcrew.api.gpunode import GPUNodeStatus, Phase
from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.core.agent_config import agent_checks
from pitcrew.core.lifecycle import decide
from pitcrew.core.views import FleetView, NodeState, NodeView, PolicyView
from pitcrew.node import agent as agent_module
from pitcrew.node.agent import AgentCore

START = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
POLICY = PolicyView(
    name="fleet",
    created=START - datetime.timedelta(days=30),
    spec=GPUHealthPolicySpec.model_validate({"nodeSelector": {"matchLabels": {"gpu": "yes"}}}),
)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime.datetime:
        return self.now


class Recorder:
    """Stands in for the GPUNode API: keeps what each agent applied."""

    def __init__(self) -> None:
        self.writes: dict[str, list[dict[str, Any]]] = {}

    def ensure(self, *_: Any, **__: Any) -> None:
        return None

    def apply_status(self, _api: Any, *, node: str, status: dict[str, Any], **_: Any) -> None:
        self.writes.setdefault(node, []).append(status)


def simulate(names: list[str], hours: float, interval: float, heartbeat: float) -> dict[str, Any]:
    """One worker: its nodes through ``hours`` of simulated time; what happened to them."""
    logging.disable(logging.WARNING)  # each retried sweep logs a warning: thousands a day
    recorder = Recorder()
    agent_module.gpunodes.ensure = recorder.ensure  # type: ignore[assignment]
    agent_module.gpunodes.apply_status = recorder.apply_status  # type: ignore[assignment]
    model = get_model("H100")
    clock = Clock()
    agents = []
    for name in names:
        backend = SimBackend(node=name, model=model, clock=clock, sleep=lambda _: None)
        checker = Checker(
            backend=backend, node=name, expect=Expectations(gpus=8, model=model, ib_ports=8)
        )
        agents.append(
            AgentCore(
                api=None,  # type: ignore[arg-type]
                node=name,
                node_uid="",
                checker=checker,
                heartbeat=datetime.timedelta(seconds=heartbeat),
                clock=clock,
            )
        )
    views = {
        n: NodeView(name=n, created=START - datetime.timedelta(days=60), gpus=8) for n in names
    }
    statuses = {n: GPUNodeStatus(phase=Phase.HEALTHY, policy=POLICY.name) for n in names}
    fleet = FleetView(total=len(names), phases={Phase.HEALTHY: len(names)})
    taken_out: dict[str, str] = {}
    sweeps = int(hours * 3600 / interval)
    cpu = time.process_time()
    for _ in range(sweeps):
        clock.now += datetime.timedelta(seconds=interval)
        for core in agents:
            if not core.tick():
                continue
            name = core.node
            applied = recorder.writes[name][-1]
            merged = statuses[name].model_dump(mode="json", by_alias=True) | applied
            state = NodeState(
                node=views[name],
                status=GPUNodeStatus.model_validate(merged),
                checks=agent_checks(POLICY, views[name]),
            )
            decision = decide(state=state, policy=POLICY, fleet=fleet, now=clock.now)
            statuses[name] = decision.status
            if decision.phase is not Phase.HEALTHY and name not in taken_out:
                taken_out[name] = f"{decision.phase}: {decision.status.reason}"
    writes = sum(len(w) for w in recorder.writes.values())
    return {
        "nodes": len(names),
        "writes": writes,
        "taken_out": taken_out,
        "cpu_s": time.process_time() - cpu,
        "sweeps": sweeps * len(names),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--heartbeat", type=float, default=300.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = [f"gpu-{i:04d}" for i in range(args.nodes)]
    slices = [names[i :: args.workers] for i in range(args.workers)]
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        parts = list(
            pool.map(
                simulate,
                slices,
                [args.hours] * args.workers,
                [args.interval] * args.workers,
                [args.heartbeat] * args.workers,
            )
        )
    wall = time.monotonic() - started
    writes = sum(p["writes"] for p in parts)
    taken_out = {k: v for p in parts for k, v in p["taken_out"].items()}
    sweeps = sum(p["sweeps"] for p in parts)
    cpu = sum(p["cpu_s"] for p in parts)
    figures = {
        "nodes": args.nodes,
        "simulated_hours": args.hours,
        "interval_s": args.interval,
        "heartbeat_s": args.heartbeat,
        "taken_out": len(taken_out),
        "taken_out_examples": dict(list(taken_out.items())[:5]),
        "writes_per_node_hour": round(writes / args.nodes / args.hours, 2),
        "heartbeats_per_node_hour": round(3600 / args.heartbeat, 2),
        "sweeps": sweeps,
        "cpu_ms_per_sweep": round(cpu / sweeps * 1000, 3),
        "wall_s": round(wall, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(f"{'nodes':<28}{args.nodes}")
    print(f"{'simulated':<28}{args.hours:g} h, sweep every {args.interval:g} s")
    print(f"{'nodes taken out (goal 0)':<28}{len(taken_out)}")
    print(
        f"{'writes per node-hour':<28}{figures['writes_per_node_hour']}"
        f" (heartbeats alone: {figures['heartbeats_per_node_hour']})"
    )
    print(f"{'CPU per sweep':<28}{figures['cpu_ms_per_sweep']} ms ({sweeps} sweeps)")
    print(f"{'wall':<28}{wall:.0f} s, load {figures['load_avg_1m']}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
