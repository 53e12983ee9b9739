"""The Hugging Face callback, in a real Trainer run (CPU, a one-layer GPT-2, a few
steps): what it writes is what the operator reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from pitcrew.client.hf import PitcrewTrainerCallback
from support.hook_patches import Patches

BATCH, SEQ = 2, 16


def test_rank_0_reports_steps_checkpoints_and_the_trainers_flops(
    tmp_path: Path, apiserver: Patches
) -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
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
    tokens = torch.randint(0, 64, (BATCH * 12, SEQ))
    data = [{"input_ids": t, "labels": t} for t in tokens]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=12,
        per_device_train_batch_size=BATCH,
        save_strategy="steps",
        save_steps=5,
        logging_steps=5,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    Trainer(
        model=model,
        args=args,
        train_dataset=data,
        callbacks=[PitcrewTrainerCallback(min_interval=0)],
    ).train()
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
    assert {r.slowest[0].node for r in timed} == {"gpu-node-7"}
