"""Benchmarks of the operator on devcluster: detection, bursts, idle cost, drains.

Usage (``--json`` adds one JSON line of every figure; ``--no-pin`` shares the
cores instead of giving the operator its own):

    python tests/bench/operator_bench.py detection [--nodes 1500] [--faults 150] [--sim-agents]
    python tests/bench/operator_bench.py detection --nodes 1500 --bursts 150,375
    python tests/bench/operator_bench.py steady [--nodes 4000] [--count 100]
    python tests/bench/operator_bench.py idle [--nodes 4000] [--seconds 120] [--profile]
    python tests/bench/operator_bench.py scale [--nodes 4000] [--count 100] [--faults 1000]
    python tests/bench/operator_bench.py drain [--nodes 50] [--pods 30]
    python tests/bench/operator_bench.py training [--nodes 750]

Each starts its own devcluster (binaries must be built), installs Pitcrew's
CRDs and RBAC, and runs the operator as its service account, as the
end-to-end tests do (:mod:`bench_cluster`).

- detection: every node Healthy, then ``--faults`` nodes fail at once: one agent
  report each, written in parallel as the agents of those nodes would
  (:mod:`fleet_reports`). Fault to cordon per node, p50/p90/p99/max, the time
  until all are cordoned, and the operator's CPU-seconds per cordon. First, on
  the same nodes, the floor (:mod:`floor`): the same reports, each node cordoned
  with one patch as soon as its report is accepted; Pitcrew's figures are
  printed as ratios to it (``ratio_to_floor``). With
  ``--sim-agents`` the fault is a Node annotation that the one process
  simulating every agent turns into the report (the second figure: it adds
  that process's queue); the latency is then split at the agent's report.
- steady: one fault at a time on a Healthy fleet with heartbeats at the
  policy's rate, each waited for: report to cordon p50/p99 at steady state,
  after the floor's one at a time on the same nodes, and the ratio to it.
- idle: all Healthy, heartbeats at the policy's rate, for ``--seconds``:
  operator RSS (and its peak), CPU share of a core, decisions per second,
  GPUNode status writes counted by the apiserver. ``--profile`` samples the
  operator with py-spy for the same window and prints where its CPU goes.
- scale: idle, steady and a burst of ``--faults`` (of the nodes the steady
  faults left alone), one after the other on one cluster.
- drain, training: see :mod:`drain_scenarios`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cluster import (
    Bench,
    CordonWatch,
    Usage,
    apiserver_status_writes,
    emit,
    memory,
    node_names,
    quantiles,
    spread,
)
from drain_scenarios import drain, training
from fleet_reports import FATAL_XID, FleetReports
from floor import Floor, ratios

from pitcrew.api.vocabulary import FAULTS_ANNOTATION, SIMULATED_LABEL
from pitcrew.kube.client import list_all

SETTLE_SECONDS = 60
FLOOR_SETTLE_SECONDS = 20
"""After the floor's cordons are lifted, before Pitcrew's measure on the same nodes:
the lifts' watch events are decided and the nodes rest again."""
PLUMBING = ("(asyncio/", "(<frozen", "(threading.py", "(pitcrew/cli/", "operator.py)",
            "reactor/running.py", "concurrent/futures/thread.py")  # fmt: skip
HEARTBEAT = "5m"


def healthy_fleet(args: argparse.Namespace, directory: Path) -> tuple[Bench, FleetReports | None]:
    """A devcluster of ``--nodes`` Healthy GPUNodes, reported by :class:`FleetReports`
    (heartbeats running) or by the simulated agents."""
    bench = Bench(
        directory, args.nodes, pinned=not args.no_pin, heartbeat_load=args.heartbeat_load or 1
    )
    try:
        bench.policy({SIMULATED_LABEL: "true"})
        bench.start(
            sim_agents=args.sim_agents, heartbeat=HEARTBEAT, lease_seconds=args.lease_seconds
        )
        reports = None
        if not args.sim_agents:
            reports = FleetReports(bench.api, node_names(args.nodes), heartbeat=300.0)
            started = time.monotonic()
            reports.first()
            print(
                f"{args.nodes} first reports written in {time.monotonic() - started:.0f}s",
                flush=True,
            )
            reports.start_heartbeats()
        bench.wait_healthy(args.nodes)
    except BaseException:
        bench.close()
        raise
    return bench, reports


def detection(args: argparse.Namespace, directory: Path) -> None:
    bench, reports = healthy_fleet(args, directory)
    try:
        time.sleep(SETTLE_SECONDS)  # steady state: the first decisions and writes are over
        left = node_names(args.nodes)
        for count in args.bursts or [args.faults]:
            targets = spread(left, count)
            burst(bench, reports, args, targets=targets)
            left = [n for n in left if n not in set(targets)]
            time.sleep(SETTLE_SECONDS)  # the last burst's drains and writes are over
    finally:
        if reports is not None:
            reports.stop()
        bench.close()


def burst(
    bench: Bench, reports: FleetReports | None, args: argparse.Namespace, *, targets: list[str]
) -> None:
    """``targets`` fail at once; fault to cordon for each, and the floor's on the same
    nodes just before (with the agents' reports; none with ``--sim-agents``)."""
    floor = floor_of(bench, reports, lambda f: f.burst(targets), targets)
    watch = CordonWatch(bench.api, targets)
    usage = Usage(bench).begin()
    injected: dict[str, float] = {}

    def inject(node: str) -> None:
        if reports is not None:
            injected[node] = reports.write(node, failing=True)
        else:
            injected[node] = time.time()
            bench.core.patch_node(
                node, {"metadata": {"annotations": {FAULTS_ANNOTATION: FATAL_XID}}}
            )

    with profiled(bench, args, "burst") as profile:
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(inject, targets))
        watch.wait(targets, timeout=600)
    spent = usage.since()
    cordoned = watch.cordoned
    latencies = [cordoned[n] - injected[n] for n in targets if n in cordoned]
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "faults": len(targets),
        "cordoned": len(latencies),
        "agents": "simulated, one process" if args.sim_agents else "one report write per node",
        "fault_to_cordon_s": quantiles(latencies),
        "all_cordoned_after_s": round(max(cordoned.values()) - min(injected.values()), 3),
        "operator_cpu_s": spent["cpu_s"],
        "operator_cpu_s_per_cordon": round(spent["cpu_s"] / max(1, len(cordoned)), 4),
        "decisions": spent["decisions"],
        **memory(bench.operator_pid),
    }
    if reports is not None:
        # From the apiserver's answer to the report: the watch, the decision, the cordon
        # (the rest of fault to cordon is the report's own wait on the loaded apiserver).
        figures["report_answered_to_cordon_s"] = quantiles(
            [cordoned[n] - reports.answered[n] for n in targets if n in cordoned]
        )
    if profile:
        figures["profile_top"] = hottest(profile)
    if floor is not None:
        figures["floor"] = floor
        figures["ratio_to_floor"] = ratios(
            {"report_to_cordon_s": figures["fault_to_cordon_s"], **figures}, floor
        )
    if args.sim_agents:
        # Split at the agent's report: the simulated agents' share, then the operator's.
        reported = report_times(bench)
        figures["agent_fault_to_report_s"] = quantiles(
            [reported[n] - injected[n] for n in targets if n in reported]
        )
        figures["operator_report_to_cordon_s"] = quantiles(
            [cordoned[n] - reported[n] for n in targets if n in cordoned and n in reported]
        )
    emit("detection", figures, bench=bench, as_json=args.json)


def floor_of(
    bench: Bench,
    reports: FleetReports | None,
    measure: Callable[[Floor], dict[str, Any]],
    targets: list[str],
) -> dict[str, Any] | None:
    """The floor (:mod:`floor`) measured on ``targets``, its cordons lifted again and
    the fleet given :data:`FLOOR_SETTLE_SECONDS`; None without the agents' reports."""
    if reports is None:
        return None
    floor = Floor(bench.api, reports)
    found = measure(floor)
    floor.release(targets)
    print(f"floor: {found}", flush=True)
    time.sleep(FLOOR_SETTLE_SECONDS)
    return found


def report_times(bench: Bench) -> dict[str, float]:
    """When each node's agent reported its current checks (Unix seconds)."""
    found = {}
    for item in list_all(bench.api, "/apis/pitcrew.dev/v1alpha1/gpunodes"):
        stamp = ((item.get("status") or {}).get("checks") or {}).get("reportTime")
        if stamp:
            found[item["metadata"]["name"]] = datetime.datetime.fromisoformat(
                stamp.replace("Z", "+00:00")
            ).timestamp()
    return found


def steady(args: argparse.Namespace, directory: Path) -> None:
    """Faults one at a time into a quiet fleet whose heartbeats keep flowing."""
    bench, reports = healthy_fleet(args, directory)
    assert reports is not None, "steady measures report to cordon: no --sim-agents"
    try:
        time.sleep(SETTLE_SECONDS)
        one_by_one(bench, reports, args, targets=spread(node_names(args.nodes), args.count))
    finally:
        reports.stop()
        bench.close()


def one_by_one(
    bench: Bench, reports: FleetReports, args: argparse.Namespace, *, targets: list[str]
) -> None:
    floor = floor_of(bench, reports, lambda f: f.one_by_one(targets, gap=args.gap), targets)
    watch = CordonWatch(bench.api, targets)
    usage = Usage(bench).begin()
    started = time.monotonic()
    latencies = []
    for node in targets:
        sent = reports.write(node, failing=True)
        if watch.wait([node], timeout=60):
            latencies.append(watch.cordoned[node] - sent)
        time.sleep(args.gap)
    seconds = time.monotonic() - started
    spent = usage.since()
    measured = quantiles(latencies)
    emit(
        "steady",
        {
            "nodes": args.nodes,
            "faults": len(targets),
            "cordoned": len(latencies),
            "gap_s": args.gap,
            "report_to_cordon_s": measured,
            "floor": floor,
            "ratio_to_floor": ratios({"report_to_cordon_s": measured}, floor or {}),
            "heartbeats_per_s": round(args.nodes / 300, 1),
            "operator_cpu_share": round(spent["cpu_s"] / seconds, 4),
            "decisions_per_s": round(spent["decisions"] / seconds, 1),
            "operator_cpu_ms_per_decision": round(
                1000 * spent["cpu_s"] / max(1, spent["decisions"]), 3
            ),
            **memory(bench.operator_pid),
        },
        bench=bench,
        as_json=args.json,
    )


def idle(args: argparse.Namespace, directory: Path) -> None:
    bench, reports = healthy_fleet(args, directory)
    try:
        time.sleep(30)
        quiet(bench, args)
    finally:
        if reports is not None:
            reports.stop()
        bench.close()


def quiet(bench: Bench, args: argparse.Namespace) -> None:
    usage = Usage(bench).begin()
    writes_before = apiserver_status_writes(bench.api)
    with profiled(bench, args, "idle") as profile:
        time.sleep(args.seconds)
    spent = usage.since()
    writes = (apiserver_status_writes(bench.api) - writes_before) / args.seconds
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "seconds": args.seconds,
        **memory(bench.operator_pid),
        "operator_cpu_share": round(spent["cpu_s"] / args.seconds, 4),
        "decisions_per_s": round(spent["decisions"] / args.seconds, 1),
        "operator_cpu_ms_per_decision": round(
            1000 * spent["cpu_s"] / max(1, spent["decisions"]), 3
        ),
        "gpunode_status_writes_per_s": round(writes, 2),
        "gpunode_objects": len(bench.gpunode_phases()),
    }
    if profile:
        figures["profile_top"] = hottest(profile)
    emit("idle", figures, bench=bench, as_json=args.json)


def scale(args: argparse.Namespace, directory: Path) -> None:
    """idle, then steady (``--count`` faults one at a time), then a burst of
    ``--faults`` at once, on one cluster: three figures for one start of a large
    devcluster."""
    bench, reports = healthy_fleet(args, directory)
    assert reports is not None, "scale writes the agents' reports itself: no --sim-agents"
    try:
        time.sleep(SETTLE_SECONDS)
        quiet(bench, args)
        names = node_names(args.nodes)
        single = spread(names, args.count)
        one_by_one(bench, reports, args, targets=single)
        time.sleep(30)  # the single faults' drains and status writes are over
        rest = [n for n in names if n not in set(single)]
        burst(bench, reports, args, targets=spread(rest, args.faults))
    finally:
        reports.stop()
        bench.close()


@contextlib.contextmanager
def profiled(bench: Bench, args: argparse.Namespace, phase: str) -> Any:
    """py-spy samples of the operator for the block's duration (``--profile``), as
    collapsed stacks in a file named after the scenario and its ``phase``, whose
    path is yielded; None without ``--profile``."""
    if not args.profile:
        yield None
        return
    out = Path(args.profile_dir) / f"operator-{args.scenario}-{phase}-{args.nodes}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen(
        [str(Path(sys.executable).parent / "py-spy"), "record", "--pid",
         str(bench.operator_pid), "--format", "raw", "--rate", "50", "--nonblocking",
         "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield out
    finally:
        spy.send_signal(2)
        spy.wait(timeout=60)
        print(f"operator profile (collapsed stacks): {out}", flush=True)


def hottest(profile: Path, top: int = 15) -> list[tuple[str, float]]:
    """The functions most samples were in, anywhere on the stack (their share of all
    samples), leaving out the event loop's and the threads' own frames."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        samples = int(count)
        total += samples
        # "function (path/file.py:123)" without the line: one entry per function.
        for frame in {f.rsplit(":", 1)[0] + ")" for f in stack.split(";")}:
            inclusive[frame] += samples
    shared = {name for name in inclusive if any(part in name for part in PLUMBING)}
    return [
        (name, round(n / max(1, total), 3))
        for name, n in inclusive.most_common(top + len(shared))
        if name not in shared
    ][:top]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "scenario", choices=["detection", "steady", "idle", "scale", "drain", "training"]
    )
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--faults", type=int, default=150)
    parser.add_argument(
        "--bursts",
        type=lambda text: [int(n) for n in text.split(",")],
        default=None,
        help="detection: several bursts one after the other, e.g. 150,375",
    )
    parser.add_argument("--count", type=int, default=100, help="steady: faults, one at a time")
    parser.add_argument("--gap", type=float, default=1.0, help="steady: seconds between faults")
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--sim-agents", action="store_true")
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument(
        "--heartbeat-load",
        type=int,
        default=None,
        help="the kubelets beat as a fleet this many times larger would "
        "(default 1; drain and training: 4)",
    )
    parser.add_argument(
        "--lease-seconds",
        type=int,
        default=15,
        help="the operator's Lease (default 15, its production default): longer where "
        "other work on the machine delays its renewals past it",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-dir", default="bench-profiles")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    defaults = {
        "detection": 1500,
        "steady": 4000,
        "idle": 4000,
        "scale": 4000,
        "drain": 50,
        "training": 750,
    }
    args.nodes = args.nodes or defaults[args.scenario]
    scenarios = {
        "detection": detection,
        "steady": steady,
        "idle": idle,
        "scale": scale,
        "drain": drain,
        "training": training,
    }
    with tempfile.TemporaryDirectory() as tmp:
        scenarios[args.scenario](args, Path(tmp))


if __name__ == "__main__":
    main()
