"""All-reduce bandwidth arithmetic, in one place.

nccl-tests reports two numbers: ``algbw`` (bytes / time) and ``busbw``, which
normalises algbw by the traffic an optimal all-reduce puts on the slowest link,
``2 (n - 1) / n``. busbw is comparable across rank counts and to the hardware
link speed, which is why every floor in :mod:`gpuhealth.models` is a busbw.
Both the PyTorch probe and the nccl-tests parser use these functions.
"""

from __future__ import annotations


def algorithm_bandwidth(*, size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (10^9 bytes, as nccl-tests)."""
    if seconds <= 0:
        raise ValueError("elapsed time must be positive")
    return size_bytes / seconds / 1e9


def allreduce_bus_factor(ranks: int) -> float:
    if ranks < 1:
        raise ValueError("an all-reduce needs at least one rank")
    return 2.0 * (ranks - 1) / ranks


def allreduce_bus_bandwidth(*, algbw_gbps: float, ranks: int) -> float:
    """busbw = algbw x 2(n-1)/n."""
    return algbw_gbps * allreduce_bus_factor(ranks)
