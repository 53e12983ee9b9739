"""Benchmark: devcluster warm start to all-nodes-Ready, and control-plane memory.

Usage: python tests/bench/devcluster_start.py --nodes 8 500

For each node count: starts a devcluster in a temporary folder (binaries must
already be built: `pitcrew devcluster build`), reports the seconds from the
call to every node Ready, lets the cluster settle, reports each component's
peak resident memory (VmHWM from /proc), then stops it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gpuhealth.models import get_model
from pitcrew.sim import devcluster

SETTLE_SECONDS = 30


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(nodes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        state = devcluster.up(
            directory=Path(tmp),
            node_count=nodes,
            gpus_per_node=8,
            model=get_model("H100"),
            timeout=600,
            log=lambda _: None,
        )
        ready = time.monotonic() - started
        time.sleep(SETTLE_SECONDS)
        peaks = {p.name: peak_rss_mib(p.pid) for p in state.processes}
        devcluster.down(directory=Path(tmp), log=lambda _: None)
    parts = ", ".join(f"{name} {mib:.0f}" for name, mib in peaks.items())
    print(
        f"nodes={nodes} ready_s={ready:.1f} peak_rss_total_mib={sum(peaks.values()):.0f} ({parts})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 500])
    for nodes in parser.parse_args().nodes:
        run(nodes)


if __name__ == "__main__":
    main()
