"""Two real ranks of an FSDP job on CPU (gloo, two processes) for the hooks' test; in
a module of its own, which the spawned processes can import.

Each block of the model is an FSDP unit of its own, as a transformer's layers are, so
every block's forward pass begins with an all-gather of its parameters: the ranks wait
for each other inside the forward pass, where the hooks time each rank's compute."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from pitcrew.client.distributed import TrainingReporter
from pitcrew.client.progress import ProgressReporter
from support.two_ranks import Recording

SLOW_SECONDS = 0.2
"""Rank 1's second block, every forward pass: a throttled GPU."""
STEPS = 13
"""The first gathering after 10 steps (the warm-up), then one a step."""
WRAPPINGS = ("FullyShardedDataParallel", "fully_shard")


class Block(torch.nn.Module):
    def __init__(self, slow: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 32)
        self.slow = slow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.slow:
            time.sleep(SLOW_SECONDS)
        return torch.relu(self.layer(x))


def model(index: int, wrapping: str) -> torch.nn.Module:
    net = torch.nn.Sequential(Block(False), Block(index == 1), Block(False))
    if wrapping == "FullyShardedDataParallel":
        return FullyShardedDataParallel(
            net, auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=torch.device("cpu")
        )
    for block in net:
        fully_shard(block)
    fully_shard(net)
    return net


def rank(index: int, port: int, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=2)
    # One role: the ranks are peers, judged from the first gathering after warm-up.
    os.environ["PITCREW_ROLE"] = "data"
    for wrapping in WRAPPINGS:
        wrapped = model(index, wrapping)
        # Rank 0 writes its progress and heartbeat, rank 1 its own pod's heartbeat.
        reporter = ProgressReporter(
            pod=f"trainer-{index}",
            namespace="ml",
            min_interval=0,
            api=Recording(out / (wrapping if index == 0 else f"{wrapping}-heartbeats-1")),
            rank=index,
            progress=index == 0,
        )
        pitcrew = TrainingReporter(wrapped, min_interval=0, node=f"node-{index}", reporter=reporter)
        optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01)
        for step in range(STEPS):
            wrapped(torch.randn(4, 32)).sum().backward()  # the reduce-scatter: a wait too
            optimizer.step()
            optimizer.zero_grad()
            pitcrew.step(step)
    dist.destroy_process_group()
    # Torch's C++ threads are torn down at interpreter exit, where one still joinable
    # now and then aborts the process (SIGABRT, "terminate called without an active
    # exception") after all its work is written: leave without that teardown.
    os._exit(0)
