"""Benchmark: what periodic verification costs a busy fleet, in GPU-hours.

Usage: python tests/bench/verification_bench.py [--nodes 200] [--hours 24]
       [--busy-hours 6] [--idle-hours 1.5] [--probe-minutes 20] [--interval 60]
       [--max-concurrent 5%] [--tick 60] [--seed 0] [--json]

A fleet of 8-GPU nodes on a simulated clock, each alternating between busy
(a training pod on it) and idle, with exponential busy and idle times of the
given means (6 h and 1.5 h: 80 % utilised). The operator's own pure decision
(``lifecycle.decide``, with a GPUHealthPolicy that enables
``validation.periodic``) decides every node every ``--tick`` seconds in
sequence, the fleet view updated after each decision as the round loop does
(``core.fleet``). A verification it starts holds the node's GPUs until its
probe reports (``--probe-minutes`` later) or a workload arrives, which
preempts it as the kube-scheduler would: the probe pod is gone and the
workload pod is on the node.

Prints verification GPU-hours as a share of idle and of all GPU-hours, the
verifications by result, how long idle nodes went between verifications, and
the CPU time of the decisions. With ``--json``, one JSON line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
import time
from dataclasses import dataclass, field

from gpuhealth.report import CheckResult, CheckStatus
from pitcrew.api.gpunode import ChecksStatus, GPUNodeStatus, Phase, VerificationResult
from pitcrew.api.policy import GPUHealthPolicySpec
from pitcrew.core import actions as a
from pitcrew.core.agent_config import agent_checks
from pitcrew.core.fleet import after_decision, fleet_of, summarize
from pitcrew.core.lifecycle import decide
from pitcrew.core.views import NodeState, NodeView, PodView, PolicyView

START = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
GPUS = 8
HOUR = datetime.timedelta(hours=1)


@dataclass
class Node:
    name: str
    status: GPUNodeStatus
    busy_until: datetime.datetime | None
    idle_until: datetime.datetime | None
    probe: str = ""
    probe_since: datetime.datetime | None = None
    idle_since: datetime.datetime | None = None
    verified_at: datetime.datetime | None = None
    gaps: list[float] = field(default_factory=list)
    """Hours from an idle node's last passed verification (or from when it went idle,
    if later) to its next passed verification."""


def passive(now: datetime.datetime) -> ChecksStatus:
    return ChecksStatus(
        report_time=now,
        backend="sim",
        suite="passive",
        results=[CheckResult(name="gpu-count", status=CheckStatus.PASS)],
    )


def probe_report(job: str, now: datetime.datetime) -> ChecksStatus:
    return ChecksStatus(
        report_time=now,
        backend="sim",
        suite="quick",
        job=job,
        results=[CheckResult(name="gemm", status=CheckStatus.PASS, gpu=g) for g in range(GPUS)],
    )


def view(node: Node, created: datetime.datetime) -> NodeView:
    pods: tuple[PodView, ...] = ()
    if node.busy_until is not None:
        pods += (PodView(namespace="train", name=f"{node.name}-trainer", owner_kind="Job"),)
    if node.probe:
        pods += (
            PodView(
                namespace="pitcrew-system", name=f"{node.probe}-x", probe=True, job_name=node.probe
            ),
        )
    return NodeView(name=node.name, created=created, pods=pods, gpus=GPUS)


@dataclass
class Tally:
    idle_gpu_s: float = 0.0
    verify_gpu_s: float = 0.0
    results: dict[str, int] = field(default_factory=dict)
    most_at_once: int = 0
    decisions: int = 0
    cpu_s: float = 0.0


class Simulation:
    """The fleet, its workload and the operator's decisions on one simulated clock."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)  # noqa: S311 - a reproducible simulation
        self.created = START - datetime.timedelta(days=30)
        limit: int | str = (
            args.max_concurrent if args.max_concurrent.endswith("%") else int(args.max_concurrent)
        )
        self.policy = PolicyView(
            name="fleet",
            created=self.created,
            spec=GPUHealthPolicySpec.model_validate(
                {
                    "nodeSelector": {"matchLabels": {"gpu": "yes"}},
                    "validation": {
                        "priorityClassName": "pitcrew-probe",
                        "periodic": {
                            "enabled": True,
                            "interval": f"{args.interval:g}m",
                            "maxConcurrent": limit,
                        },
                    },
                }
            ),
        )
        self.probe_time = datetime.timedelta(minutes=args.probe_minutes)
        self.tally = Tally()
        share_busy = args.busy_hours / (args.busy_hours + args.idle_hours)
        self.nodes = []
        for i in range(args.nodes):
            busy = self.rng.random() < share_busy
            self.nodes.append(
                Node(
                    name=f"gpu-{i:05d}",
                    status=GPUNodeStatus(
                        phase=Phase.HEALTHY, phase_since=self.created, checks=passive(START)
                    ),
                    busy_until=self.draw(args.busy_hours, START) if busy else None,
                    idle_until=None if busy else self.draw(args.idle_hours, START),
                    idle_since=None if busy else START,
                )
            )

    def draw(self, mean_hours: float, now: datetime.datetime) -> datetime.datetime:
        return now + self.rng.expovariate(1 / mean_hours) * HOUR

    def move(self, now: datetime.datetime) -> None:
        """Jobs end and start (one arriving preempts the probe); probes report."""
        for node in self.nodes:
            if node.busy_until is not None and now >= node.busy_until:
                node.busy_until, node.idle_until = None, self.draw(self.args.idle_hours, now)
                node.idle_since = now
            elif node.idle_until is not None and now >= node.idle_until:
                node.idle_until, node.busy_until = None, self.draw(self.args.busy_hours, now)
                node.idle_since = None
                node.probe = ""  # the scheduler deleted the probe pod to make room
            elif node.probe and node.probe_since and now - node.probe_since >= self.probe_time:
                report = probe_report(node.probe, now)
                node.status = node.status.model_copy(update={"probe": report})
            node.status = node.status.model_copy(
                update={"checks": passive(now), "last_heartbeat": now}
            )
            if node.busy_until is None:
                self.tally.idle_gpu_s += GPUS * self.args.tick
            if node.probe:
                self.tally.verify_gpu_s += GPUS * self.args.tick

    def decide(self, now: datetime.datetime) -> None:
        """One round: every node decided in turn, the fleet updated after each."""
        fleet = fleet_of((n.name, summarize(n.status)) for n in self.nodes)
        self.tally.most_at_once = max(self.tally.most_at_once, fleet.verifying)
        started = time.process_time()
        for node in self.nodes:
            before = node.status
            seen = view(node, self.created)
            decision = decide(
                state=NodeState(node=seen, status=before, checks=agent_checks(self.policy, seen)),
                policy=self.policy,
                fleet=fleet,
                now=now,
            )
            fleet = after_decision(fleet, node=node.name, before=before, decision=decision)
            node.status = decision.status
            for action in decision.actions:
                if isinstance(action, a.StartProbe) and action.reason == "VerificationStarted":
                    node.probe, node.probe_since = action.name, now
                elif isinstance(action, a.CancelProbe):
                    node.probe = ""
            self.ended(node, before, now)
            self.tally.decisions += 1
        self.tally.cpu_s += time.process_time() - started

    def ended(self, node: Node, before: GPUNodeStatus, now: datetime.datetime) -> None:
        verification, old = node.status.verification, before.verification
        if not (verification and old and old.job and verification.last_time == now):
            return
        result = str(verification.last_result)
        self.tally.results[result] = self.tally.results.get(result, 0) + 1
        if verification.last_result is VerificationResult.PASSED:
            node.probe = ""  # the probe pod exits after its report
            since = max(filter(None, (node.verified_at, node.idle_since)), default=now)
            node.gaps.append((now - since) / HOUR)
            node.verified_at = now

    def summary(self) -> dict[str, object]:
        args, tally = self.args, self.tally
        all_gpu_s = args.nodes * GPUS * args.hours * 3600
        gaps = sorted(g for n in self.nodes for g in n.gaps)
        return {
            "nodes": args.nodes,
            "hours": args.hours,
            "utilisation": round(1 - tally.idle_gpu_s / all_gpu_s, 3),
            "interval_min": args.interval,
            "probe_min": args.probe_minutes,
            "max_concurrent": args.max_concurrent,
            "verification_gpu_hours": round(tally.verify_gpu_s / 3600, 1),
            "idle_gpu_hours": round(tally.idle_gpu_s / 3600, 1),
            "all_gpu_hours": round(all_gpu_s / 3600, 1),
            "share_of_idle": round(tally.verify_gpu_s / tally.idle_gpu_s, 3)
            if tally.idle_gpu_s
            else None,
            "share_of_all": round(tally.verify_gpu_s / all_gpu_s, 4),
            "verifications": tally.results,
            "most_at_once": tally.most_at_once,
            "hours_to_verify_median": round(statistics.median(gaps), 2) if gaps else None,
            "hours_to_verify_p90": round(gaps[int(0.9 * (len(gaps) - 1))], 2) if gaps else None,
            "taken_out": sum(n.status.phase is not Phase.HEALTHY for n in self.nodes),
            "decide_us": round(tally.cpu_s / max(tally.decisions, 1) * 1e6, 1),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--busy-hours", type=float, default=6.0)
    parser.add_argument("--idle-hours", type=float, default=1.5)
    parser.add_argument("--probe-minutes", type=float, default=20)
    parser.add_argument("--interval", type=float, default=60, help="minutes")
    parser.add_argument("--max-concurrent", default="5%")
    parser.add_argument("--tick", type=float, default=60, help="seconds between rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sim = Simulation(args)
    now, end = START, START + datetime.timedelta(hours=args.hours)
    while now < end:
        sim.move(now)
        sim.decide(now)
        now += datetime.timedelta(seconds=args.tick)
    summary = sim.summary()
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>24}  {value}")
    return 0 if summary["taken_out"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
