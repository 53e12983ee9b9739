"""The Hugging Face callback, in a real Trainer run (CPU, a one-layer GPT-2, a few
steps): what it writes is what the operator reads."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from pitcrew.client.hf import PitcrewTrainerCallback
from support.hook_patches import Patches

BATCH, SEQ = 2, 16


def tiny() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(
        GPT2Config(
            n_layer=1,
            n_embd=32,
            n_head=2,
            vocab_size=64,
            n_positions=SEQ,
            bos_token_id=0,
            eos_token_id=0,
        )
    )


def trainer(folder: Path, model: GPT2LMHeadModel, steps: int) -> Trainer:
    tokens = torch.randint(0, 64, (BATCH * steps, SEQ))
    data = [{"input_ids": t, "labels": t} for t in tokens]
    args = TrainingArguments(
        output_dir=str(folder),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        save_strategy="steps",
        save_steps=5,
        logging_steps=5,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    return Trainer(
        model=model,
        args=args,
        train_dataset=data,
        callbacks=[PitcrewTrainerCallback(min_interval=0)],
    )


def test_rank_0_reports_steps_checkpoints_and_the_trainers_flops(
    tmp_path: Path, apiserver: Patches, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PITCREW_ROLE", "data")  # a rank with a role is judged at once
    model = tiny()
    trainer(tmp_path, model, 12).train()
    reports = apiserver.reports()
    last = reports[-1]
    assert last.step == 12
    # Saved every 5 steps and at the end, each reported once saved.
    assert sorted({r.checkpoint_step for r in reports if r.checkpoint_step}) == [5, 10, 12]
    assert last.parameters == model.num_parameters()
    # The Trainer's own count: 6 · non-embedding parameters · tokens of a step.
    expected = 6 * model.num_parameters(exclude_embeddings=True) * BATCH * SEQ
    assert last.flops_per_step == pytest.approx(expected)
    timed = [r for r in reports if r.step_seconds is not None]
    assert timed, "no report carried the ranks' step times"
    # The first gathering is the warm-up; the rank is named in each one after (a loaded
    # machine may fold those into one report, the latest gathering's).
    named = [r for r in timed if r.slowest]
    assert {r.slowest[0].node for r in named} == {"gpu-node-7"}
    assert named[-1] is timed[-1]


def test_a_resumed_run_reports_the_checkpoint_it_went_back_to(
    tmp_path: Path, apiserver: Patches
) -> None:
    trainer(tmp_path, tiny(), 10).train()
    state = tmp_path / "checkpoint-10" / "trainer_state.json"
    saved_at = datetime.datetime.fromtimestamp(state.stat().st_mtime, datetime.UTC)
    before = len(apiserver.reports())
    trainer(tmp_path, tiny(), 12).train(resume_from_checkpoint=str(tmp_path / "checkpoint-10"))
    restarted = apiserver.reports()[before:]
    assert (restarted[0].checkpoint_step, restarted[0].checkpoint_time) == (10, saved_at)
    assert restarted[-1].step == 12
