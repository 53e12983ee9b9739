"""Active probes on PyTorch: bf16 GEMM, HBM copy, host-to-device copy, all-reduce.

PyTorch is optional (``pip install 'pitcrew-operator[active]'``) and imported only when
a probe runs, so gpuhealth works on nodes and laptops without it. Timing uses
CUDA events around a warmed-up loop. The single-node all-reduce uses
nccl-tests when present (see :mod:`gpuhealth.active.nccl_tests`), else one
process per GPU with the NCCL backend; the multi-node all-reduce takes its
rendezvous from the usual environment (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE) so it runs under torchrun, a Job or by hand alike.
"""

from __future__ import annotations

import os
from typing import Any

from gpuhealth.active import nccl_tests
from gpuhealth.active.probes import ProbeUnavailableError
from gpuhealth.bandwidth import algorithm_bandwidth, allreduce_bus_bandwidth
from gpuhealth.distribution import install_hint

GEMM_N = 8192
HBM_BYTES = 4 << 30
H2D_BYTES = 1 << 30
ALLREDUCE_BYTES = 1 << 30
WARMUP = 3


def _torch() -> Any:
    try:
        import torch  # noqa: PLC0415 - optional dependency, imported on use
    except ImportError:
        raise ProbeUnavailableError(
            f"PyTorch is not installed; install the active extra: {install_hint('active')}"
        ) from None
    if not torch.cuda.is_available():
        raise ProbeUnavailableError("PyTorch sees no CUDA device")
    return torch


def _timed(torch: Any, device: str, fn: Any, iterations: int) -> float:
    """Seconds per iteration of ``fn`` on ``device``, after a warm-up."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        fn()
    end.record()
    torch.cuda.synchronize(device)
    return float(start.elapsed_time(end)) / 1000.0 / iterations


class TorchProbes:
    name = "torch"

    def __init__(self, *, iterations: int = 20) -> None:
        self.torch = _torch()
        self.iterations = iterations

    def gemm_tflops(self, gpu: int) -> float:
        torch, device = self.torch, f"cuda:{gpu}"
        a = torch.randn(GEMM_N, GEMM_N, device=device, dtype=torch.bfloat16)
        b = torch.randn(GEMM_N, GEMM_N, device=device, dtype=torch.bfloat16)
        seconds = _timed(torch, device, lambda: torch.matmul(a, b), self.iterations)
        return 2 * GEMM_N**3 / seconds / 1e12

    def hbm_gbps(self, gpu: int) -> float:
        torch, device = self.torch, f"cuda:{gpu}"
        src = torch.empty(HBM_BYTES, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        seconds = _timed(torch, device, lambda: dst.copy_(src), self.iterations)
        return 2 * HBM_BYTES / seconds / 1e9  # each copy reads and writes every byte

    def h2d_gbps(self, gpu: int) -> float:
        torch, device = self.torch, f"cuda:{gpu}"
        host = torch.empty(H2D_BYTES, dtype=torch.uint8).pin_memory()
        dst = torch.empty(H2D_BYTES, dtype=torch.uint8, device=device)
        seconds = _timed(torch, device, lambda: dst.copy_(host, non_blocking=True), self.iterations)
        return algorithm_bandwidth(size_bytes=H2D_BYTES, seconds=seconds)

    def allreduce_busbw_gbps(self) -> float:
        gpus = self.torch.cuda.device_count()
        if nccl_tests.available():
            return nccl_tests.run_allreduce(gpus=gpus)
        context = self.torch.multiprocessing.get_context("spawn")
        queue = context.SimpleQueue()
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        processes = [
            context.Process(target=_allreduce_rank, args=(rank, gpus, self.iterations, queue))
            for rank in range(gpus)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        results = [queue.get() for _ in range(gpus)]
        if any(isinstance(r, str) for r in results):
            raise ProbeUnavailableError(next(r for r in results if isinstance(r, str)))
        return float(min(results))


def _allreduce_rank(rank: int, world: int, iterations: int, queue: Any) -> None:
    try:
        queue.put(
            allreduce_busbw(rank=rank, world_size=world, local_gpu=rank, iterations=iterations)
        )
    except Exception as error:
        queue.put(f"rank {rank}: {type(error).__name__}: {error}")


def allreduce_busbw(
    *,
    rank: int,
    world_size: int,
    local_gpu: int,
    iterations: int = 20,
    size_bytes: int = ALLREDUCE_BYTES,
) -> float:
    """One rank of an all-reduce benchmark over NCCL; returns busbw in GB/s.

    Used for the single-node probe (one process per GPU) and for multi-node
    pairs and rings (one process per GPU per node, rendezvous from env)."""
    torch = _torch()
    import torch.distributed as dist  # noqa: PLC0415

    device = f"cuda:{local_gpu}"
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    try:
        tensor = torch.ones(size_bytes // 2, dtype=torch.bfloat16, device=device)
        seconds = _timed(torch, device, lambda: dist.all_reduce(tensor), iterations)
        algbw = algorithm_bandwidth(size_bytes=size_bytes, seconds=seconds)
        return allreduce_bus_bandwidth(algbw_gbps=algbw, ranks=world_size)
    finally:
        dist.destroy_process_group()


def multinode_allreduce_busbw(*, iterations: int = 20) -> float:
    """Multi-node all-reduce for this process, rendezvous from the environment."""
    missing = [
        v for v in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if v not in os.environ
    ]
    if missing:
        raise ProbeUnavailableError(f"multi-node all-reduce needs {', '.join(missing)} set")
    return allreduce_busbw(
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        local_gpu=int(os.environ.get("LOCAL_RANK", "0")),
        iterations=iterations,
    )
