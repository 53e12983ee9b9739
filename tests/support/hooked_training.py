"""Training runs with Pitcrew's framework hooks, as a tenant's pod would run them,
for the end-to-end tests (each in a process of its own, with the pod's environment).

``python hooked_training.py lightning STEPS``: one Lightning process, a checkpoint
every 10 steps, a tenth of a second a step.
``python hooked_training.py ranks STEPS NODE0 NODE1 SLOW``: two ``torch.distributed``
ranks (gloo) with the plain-loop helper; rank 1's forward pass takes SLOW seconds
more (a throttled GPU) from the start; both ranks name one role (data parallelism:
peers), so rank 1 is judged against rank 0's pace, not its own; rank 0 checkpoints
every 50 steps.
``python hooked_training.py hang STEPS STOP PAUSE SECONDS``: two ranks (gloo), each
writing its own pod's heartbeat (``RANK_PODS``, ``RANK_NODES``, ``RANK_KUBECONFIGS``:
one per rank, comma-separated); a twentieth of a second a step. With STOP > 0 rank 1
freezes after step STOP (SIGSTOP: its process, heartbeat thread included, stops as
with a GPU driver stuck in the kernel) and rank 0 waits in the next all-reduce;
with PAUSE > 0 rank 0 announces a pause after step PAUSE and sleeps SECONDS (a slow
checkpoint), rank 1 waiting in the all-reduce.
"""

from __future__ import annotations

import os
import signal
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


def hung(index: int, port: int, steps: int, plan: tuple[int, int, float]) -> None:
    stop, pause, seconds = plan
    for variable in ("POD_NAME", "NODE_NAME", "KUBECONFIG"):
        os.environ[variable] = os.environ[f"RANK_{variable.split('_')[0]}S"].split(",")[index]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=2)
    model = Slow(0.03)
    pitcrew = TrainingReporter(model, min_interval=1.0, tokens_per_step=4096)
    for step in range(1, steps + 1):
        model(torch.randn(8, 64)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        pitcrew.step(step)
        if step == stop and index == 1:
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen, every thread: a hung GPU driver
        if step == pause and index == 0:
            pitcrew.pause()
            time.sleep(seconds)
    pitcrew.flush()
    dist.destroy_process_group()


def main() -> None:
    mode, steps = sys.argv[1], int(sys.argv[2])
    if mode == "lightning":
        lightning(steps, Path(os.environ.get("TMPDIR", "/tmp")) / f"ckpt-{os.getpid()}")
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if mode == "hang":
        stop, pause, seconds = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
        mp.spawn(hung, args=(port, steps, (stop, pause, seconds)), nprocs=2, join=True)
        return
    nodes, slow = sys.argv[3:5], float(sys.argv[5])
    mp.spawn(rank, args=(port, steps, nodes, slow), nprocs=2, join=True)


if __name__ == "__main__":
    main()
