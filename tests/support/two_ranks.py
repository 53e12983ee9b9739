"""Two real ranks of a ``torch.distributed`` job (gloo, two processes) for the
helper's test; in a module of its own, which the spawned processes can import."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pitcrew.client.distributed import TrainingReporter
from pitcrew.client.progress import ProgressReporter

SLOW_SECONDS = 0.03
STEPS = 30


class Recording:
    """The pod API, as far as rank 0 writes to it: each patch appended to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def patch_namespaced_pod(
        self, name: str, namespace: str, body: dict[str, Any], **_: object
    ) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps(body["metadata"]["annotations"]) + "\n")


class Model(torch.nn.Module):
    def __init__(self, slow: bool) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 8)
        self.slow = slow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.slow:
            time.sleep(SLOW_SECONDS)  # a throttled GPU: this rank's own compute
        return self.layer(x)


def rank(index: int, port: int, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=2)
    model = Model(slow=index == 1)
    reporter = None
    if index == 0:
        reporter = ProgressReporter(
            pod="trainer-0", namespace="ml", min_interval=0, api=Recording(out)
        )
    pitcrew = TrainingReporter(model, min_interval=0, node=f"node-{index}", reporter=reporter)
    for step in range(STEPS):
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        for p in model.parameters():  # the gradient all-reduce: ranks wait for each other
            dist.all_reduce(p.grad)
        pitcrew.step(step)
    dist.destroy_process_group()
