"""All-reduce through NVIDIA's nccl-tests (``all_reduce_perf``), when installed.

Preferred over the PyTorch probe for all-reduce: it is the tool every vendor
quotes, so its busbw compares directly with published floors. The binary is
run with one process driving all local GPUs (``-g N``) at the message size of
the floor (16 GiB by default), and its output is parsed by
:mod:`gpuhealth.parsers.nccl_tests`; corrupted values (out-of-bounds or
``FAILED``) fail the probe whatever the bandwidth.
"""

from __future__ import annotations

import shutil
import subprocess

from gpuhealth.active.probes import ProbeFailedError, ProbeUnavailableError
from gpuhealth.parsers import ParseError
from gpuhealth.parsers.nccl_tests import parse_text

BINARY = "all_reduce_perf"


def available() -> bool:
    return shutil.which(BINARY) is not None


def run_allreduce(
    *, gpus: int, size: str = "16G", iterations: int = 20, timeout: float = 600.0
) -> float:
    """Run ``all_reduce_perf`` and return the busbw at the largest size (GB/s)."""
    binary = shutil.which(BINARY)
    if binary is None:
        raise ProbeUnavailableError(f"{BINARY} (nccl-tests) is not on PATH")
    argv = [
        binary,
        "-b",
        size,
        "-e",
        size,
        "-f",
        "2",
        "-g",
        str(gpus),
        "-n",
        str(iterations),
        "-c",
        "1",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ProbeUnavailableError(f"{BINARY} did not finish in {timeout:.0f}s") from None
    try:
        result = parse_text(done.stdout, source=BINARY)
    except ParseError as error:
        tail = (done.stderr or "").strip().splitlines()[-3:]
        raise ProbeUnavailableError(
            f"{error} (exit {done.returncode}; {' | '.join(tail)})"
        ) from None
    if result.failed:
        raise ProbeFailedError(
            f"all-reduce returned wrong data: {result.out_of_bounds} out-of-bounds values"
        )
    return result.peak_busbw_gbps
