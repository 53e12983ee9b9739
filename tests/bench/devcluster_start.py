"""Benchmark: devcluster warm start to all-nodes-Ready, and control-plane memory.

Usage: python tests/bench/devcluster_start.py --nodes 8 500

For each node count: starts a devcluster in a temporary folder (binaries must
already be built: `pitcrew devcluster build`), reports the seconds from the
call to every node Ready, lets the cluster settle, reports each component's
peak resident memory (VmHWM from /proc) and its share of a core while the idle
cluster settles (kwok's heartbeats and Lease renewals, the controllers' loops:
what the control plane costs before any operator runs), then stops it. Past
1,000 nodes kwok's heartbeats slow with the fleet
(``pitcrew.dev.devcluster.cluster.heartbeats``); the figures say which were used.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from gpuhealth.models import get_model
from pitcrew.dev import devcluster
from pitcrew.dev.devcluster.cluster import heartbeats

SETTLE_SECONDS = 60


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    ticks = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(ticks[11]) + int(ticks[12])) / os.sysconf("SC_CLK_TCK")


def run(nodes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        state = devcluster.up(
            directory=Path(tmp),
            node_count=nodes,
            gpus_per_node=8,
            model=get_model("H100"),
            timeout=max(600.0, nodes * 0.3),
            log=lambda _: None,
        )
        ready = time.monotonic() - started
        before = {p.name: cpu_seconds(p.pid) for p in state.processes}
        time.sleep(SETTLE_SECONDS)
        busy = {
            p.name: (cpu_seconds(p.pid) - before[p.name]) / SETTLE_SECONDS for p in state.processes
        }
        peaks = {p.name: peak_rss_mib(p.pid) for p in state.processes}
        devcluster.down(directory=Path(tmp), log=lambda _: None)
    beat = heartbeats(nodes)
    parts = ", ".join(f"{name} {mib:.0f}" for name, mib in peaks.items())
    cpu = ", ".join(f"{name} {share:.0%}" for name, share in busy.items())
    print(
        f"nodes={nodes} ready_s={ready:.1f} "
        f"peak_rss_total_mib={sum(peaks.values()):.0f} ({parts}); "
        f"idle CPU {sum(busy.values()):.0%} of a core ({cpu}); Lease {beat.lease_seconds}s, "
        f"status every {beat.status_seconds}-{beat.status_seconds + beat.status_jitter_seconds}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 500])
    for nodes in parser.parse_args().nodes:
        run(nodes)


if __name__ == "__main__":
    main()
