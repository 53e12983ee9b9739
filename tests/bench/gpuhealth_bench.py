"""Benchmark: CPU cost of a passive sweep, and kernel-log parsing throughput.

Usage: python tests/bench/gpuhealth_bench.py

- passive sweep: one Checker.run() over 8 simulated H100s (every passive
  check, default noise), CPU time per sweep (process_time), median of 200
  sweeps after 20 warm-up sweeps;
- kernel log: a 10 MB dmesg-style log with one NVRM Xid line in 200, parsed
  with gpuhealth.parsers.kmsg.parse_text; wall time, best of 5.
"""

from __future__ import annotations

import statistics
import time

from gpuhealth.backends.sim import SimBackend
from gpuhealth.checks import Expectations
from gpuhealth.models import get_model
from gpuhealth.parsers import kmsg
from gpuhealth.runner import Checker

SWEEPS, WARMUP = 200, 20
LOG_BYTES = 10 * 2**20


def passive_sweep_ms() -> float:
    backend = SimBackend(node="bench", model=get_model("H100"), sleep=lambda _: None)
    checker = Checker(backend=backend, node="bench", expect=Expectations(gpus=8))
    samples = []
    for index in range(WARMUP + SWEEPS):
        started = time.process_time()
        checker.run()
        if index >= WARMUP:
            samples.append((time.process_time() - started) * 1000)
    checker.close()
    return statistics.median(samples)


def synthetic_log() -> str:
    lines = []
    size = 0
    index = 0
    while size < LOG_BYTES:
        if index % 200 == 0:
            line = f"[{index:12.6f}] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=python, Graphics"
        else:
            line = (
                f"[{index:12.6f}] mlx5_core 0000:3b:00.0: mlx5_cmd_out_err: QUERY_VPORT "
                f"op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x{index:x})"
            )
        lines.append(line)
        size += len(line) + 1
        index += 1
    return "\n".join(lines)


def kmsg_parse_s() -> tuple[float, int, int]:
    text = synthetic_log()
    best = float("inf")
    events = 0
    for _ in range(5):
        started = time.perf_counter()
        events = len(kmsg.parse_text(text).xids)
        best = min(best, time.perf_counter() - started)
    return best, len(text.encode()), events


def main() -> None:
    print(f"passive sweep, 8 sim GPUs: {passive_sweep_ms():.2f} ms CPU (median of {SWEEPS})")
    seconds, size, events = kmsg_parse_s()
    print(
        f"kernel log parse: {size / 2**20:.1f} MiB, {events} XIDs in {seconds:.3f} s "
        f"({size / 2**20 / seconds:.0f} MiB/s)"
    )


if __name__ == "__main__":
    main()
