"""The Lightning callback, in a real Lightning run (CPU, a tiny model, a few steps):
what it writes is what the operator reads; under either Lightning package, and after
a restart from a checkpoint."""

from __future__ import annotations

import datetime
import importlib
import os
import re
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import pytorch_lightning
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from pitcrew.client.lightning import SAVED_AT, PitcrewCallback
from support.hook_patches import Patches

BATCH, IN, OUT = 4, 32, 16


class Tiny(pl.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(IN, OUT, bias=False)

    def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
        (x,) = batch
        return self.layer(x).square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(tmp_path: Path, callback: PitcrewCallback, *, steps: int = 12, accumulate: int = 1) -> None:
    data = DataLoader(TensorDataset(torch.randn(BATCH * steps * accumulate, IN)), batch_size=BATCH)
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        accumulate_grad_batches=accumulate,
        callbacks=[callback, ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=5)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(Tiny(), data)


def test_rank_0_reports_steps_checkpoints_flops_and_its_node(
    tmp_path: Path, apiserver: Patches, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PITCREW_ROLE", "data")  # a rank with a role is judged at once
    fit(tmp_path, PitcrewCallback(min_interval=0))
    reports = apiserver.reports()
    assert set(apiserver.paths) == {"/api/v1/namespaces/research/pods/pretrain-workers-0-0"}
    last = reports[-1]
    assert last.step == 12
    assert last.checkpoint_step == 10  # saved at 5 and 10, each reported once on disk
    assert [r.checkpoint_step for r in reports if r.checkpoint_step] == sorted(
        r.checkpoint_step for r in reports if r.checkpoint_step
    )
    assert last.parameters == IN * OUT
    # One optimizer step, as torch's FLOP counter counts the second batch: forward
    # 2·B·IN·OUT, backward the weight's gradient only (the input needs none), as much.
    assert last.flops_per_step == pytest.approx(4 * BATCH * IN * OUT)
    timed = [r for r in reports if r.step_seconds is not None]
    assert timed, "no report carried the ranks' step times"
    # The first gathering is the warm-up; the rank is named in each one after. The
    # writer sends the latest gathering with its next write, so a loaded machine may
    # fold the later gatherings into one report: at least one names the rank.
    named = [r for r in timed if r.slowest]
    assert named, "no gathering after the warm-up named the rank"
    assert all(r.slowest[0].node == "gpu-node-7" for r in named)
    assert named[-1] is timed[-1]
    assert all(r.step_seconds and r.step_seconds > 0 for r in timed)


def test_gradient_accumulation_reports_optimizer_steps(tmp_path: Path, apiserver: Patches) -> None:
    fit(tmp_path, PitcrewCallback(min_interval=0), steps=6, accumulate=3)
    steps = [r.step for r in apiserver.reports()]
    assert steps[-1] == 6
    assert steps == sorted(steps)
    assert apiserver.reports()[-1].flops_per_step == pytest.approx(3 * 4 * BATCH * IN * OUT)


def test_an_unreachable_apiserver_never_stops_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, apiserver: Patches
) -> None:
    config = Path(os.environ["KUBECONFIG"])
    dead = tmp_path / "dead"
    dead.write_text(re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:9", config.read_text()))
    monkeypatch.setenv("KUBECONFIG", str(dead))
    fit(tmp_path, PitcrewCallback(min_interval=0), steps=3)
    assert apiserver.annotations == []


def test_a_resumed_run_reports_the_checkpoint_it_went_back_to(
    tmp_path: Path, apiserver: Patches
) -> None:
    fit(tmp_path, PitcrewCallback(min_interval=0), steps=10)
    saved = tmp_path / "epoch=0-step=10.ckpt"
    saved_at = datetime.datetime.fromisoformat(torch.load(saved, weights_only=False)[SAVED_AT])
    before = len(apiserver.reports())
    data = DataLoader(TensorDataset(torch.randn(BATCH * 15, IN)), batch_size=BATCH)
    pl.Trainer(
        max_steps=15, accelerator="cpu", devices=1, callbacks=[PitcrewCallback(min_interval=0)],
        logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, default_root_dir=tmp_path,
    ).fit(Tiny(), data, ckpt_path=saved)  # fmt: skip
    restarted = apiserver.reports()[before:]
    # From its first report on, the restarted run says where it went back to.
    assert (restarted[0].checkpoint_step, restarted[0].checkpoint_time) == (10, saved_at)
    assert restarted[0].step >= 10
    assert restarted[-1].step == 15


class PtlTiny(pytorch_lightning.LightningModule):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(IN, OUT, bias=False)

    def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
        (x,) = batch
        return self.layer(x).square().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_pytorch_lightning_trainer_takes_the_same_callback(
    tmp_path: Path, apiserver: Patches
) -> None:
    callback = PitcrewCallback(min_interval=0)
    assert isinstance(callback, pytorch_lightning.Callback)
    assert isinstance(callback, pl.Callback)
    data = DataLoader(TensorDataset(torch.randn(BATCH * 6, IN)), batch_size=BATCH)
    saving = pytorch_lightning.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=5)
    pytorch_lightning.Trainer(
        max_steps=6, accelerator="cpu", devices=1, callbacks=[callback, saving],
        logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path,
    ).fit(PtlTiny(), data)  # fmt: skip
    last = apiserver.reports()[-1]
    assert (last.step, last.checkpoint_step) == (6, 5)


def test_with_pytorch_lightning_alone_the_callback_is_its_callback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "pitcrew.client.lightning")  # imported afresh, then restored
    for name in ("lightning", "lightning.pytorch"):
        monkeypatch.setitem(sys.modules, name, None)  # what an environment without it gives
    alone = importlib.import_module("pitcrew.client.lightning")
    bases = alone.PitcrewCallback.__mro__
    assert pytorch_lightning.Callback in bases
    assert pl.Callback not in bases
