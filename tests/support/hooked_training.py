"""Training runs with Pitcrew's framework hooks, as a tenant's pod would run them,
for the end-to-end tests (each in a process of its own, with the pod's environment).

``python hooked_training.py lightning STEPS``: one Lightning process, a checkpoint
every 10 steps, a tenth of a second a step.
``python hooked_training.py ranks STEPS NODE0 NODE1 SLOW``: two ``torch.distributed``
ranks (gloo) with the plain-loop helper; rank 1's forward pass takes SLOW seconds
more (a throttled GPU) from the start; both ranks name one role (data parallelism:
peers), so rank 1 is judged against rank 0's pace, not its own; rank 0 checkpoints
every 50 steps.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from pitcrew.client.distributed import TrainingReporter
from pitcrew.client.lightning import PitcrewCallback


class Tiny(pl.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(64, 64)

    def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
        time.sleep(0.1)
        return self.layer(batch[0]).square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def lightning(steps: int, folder: Path) -> None:
    data = DataLoader(TensorDataset(torch.randn(8 * steps, 64)), batch_size=8)
    pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        callbacks=[
            PitcrewCallback(min_interval=0.5),
            ModelCheckpoint(folder, every_n_train_steps=10),
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=folder,
    ).fit(Tiny(), data)


class Slow(torch.nn.Module):
    def __init__(self, slow: float) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(64, 64)
        self.slow = slow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.02 + self.slow)
        return self.layer(x)


def rank(index: int, port: int, steps: int, nodes: list[str], slow: float) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=2)
    model = Slow(slow if index == 1 else 0.0)
    pitcrew = TrainingReporter(
        model, min_interval=1.0, node=nodes[index], role="data", tokens_per_step=4096
    )
    for step in range(1, steps + 1):
        model(torch.randn(8, 64)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        pitcrew.step(step)
        if step % 50 == 0:
            pitcrew.checkpoint(step)
    dist.destroy_process_group()


def main() -> None:
    mode, steps = sys.argv[1], int(sys.argv[2])
    if mode == "lightning":
        lightning(steps, Path(os.environ.get("TMPDIR", "/tmp")) / f"ckpt-{os.getpid()}")
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nodes, slow = sys.argv[3:5], float(sys.argv[5])
    mp.spawn(rank, args=(port, steps, nodes, slow), nprocs=2, join=True)


if __name__ == "__main__":
    main()
