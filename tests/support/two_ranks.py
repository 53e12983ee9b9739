"""Two real ranks of a ``torch.distributed`` job (gloo, two processes) for the
helper's test; in a module of its own, which the spawned processes can import."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pitcrew.client.distributed import TrainingReporter
from pitcrew.client.progress import ProgressReporter

STAGE_SECONDS = (0.1, 0.15)
"""Each rank's forward pass while healthy: rank 1 is always 1.5x rank 0 (a pipeline's
first stage, an expert with more tokens): the job's shape, no fault."""
SLOWED_AT = 20
"""The step from which rank 0's GPU runs slow: :data:`SLOWED_SECONDS` a forward pass,
2x its usual, and yet only 1.14x the median of the two ranks."""
SLOWED_SECONDS = 0.2
STEPS = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Recording:
    """The pod API, as far as a rank writes to it: each patch appended to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def patch_namespaced_pod(
        self, name: str, namespace: str, body: dict[str, Any], **_: object
    ) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps(body["metadata"]["annotations"]) + "\n")


class Model(torch.nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 8)
        self.index = index
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        slowed = self.index == 0 and self.step >= SLOWED_AT
        time.sleep(SLOWED_SECONDS if slowed else STAGE_SECONDS[self.index])  # its own compute
        return self.layer(x)


def rank(index: int, port: int, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=2)
    model = Model(index)
    # Rank 0 writes its progress and heartbeat, rank 1 its own pod's heartbeat.
    reporter = ProgressReporter(
        pod=f"trainer-{index}",
        namespace="ml",
        min_interval=0,
        api=Recording(out if index == 0 else out.with_name("heartbeats-1")),
        rank=index,
        progress=index == 0,
    )
    pitcrew = TrainingReporter(model, min_interval=0, node=f"node-{index}", reporter=reporter)
    for step in range(STEPS):
        model.step = step
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        for p in model.parameters():  # the gradient all-reduce: ranks wait for each other
            dist.all_reduce(p.grad)
        pitcrew.step(step)
    dist.destroy_process_group()
    # Torch's C++ threads are torn down at interpreter exit, where one still joinable
    # now and then aborts the process (SIGABRT, "terminate called without an active
    # exception") after all its work is written: leave without that teardown.
    os._exit(0)
