"""Pitcrew for the Hugging Face ``Trainer``: one callback, no other change.

::

    from pitcrew.client.hf import PitcrewTrainerCallback

    trainer = Trainer(model=model, args=args, ..., callbacks=[PitcrewTrainerCallback()])

Rank 0 then writes the ``pitcrew.dev/progress`` annotation on its pod (``pip install
'pitcrew-operator[hf]'``; the pod needs ``POD_NAME``/``POD_NAMESPACE`` and ``NODE_NAME`` from
the downward API and ``patch`` on its own pod): the Trainer's global step, each
checkpoint once saved, the model's parameters, the FLOPs per optimizer step the
Trainer itself counts (``state.total_flos``, summed over the ranks, divided by the
steps it grew over, as of its last log or save), and every rank's forward-pass time, gathered as
:class:`~pitcrew.client.distributed.TrainingReporter` does. Writes happen on a thread of
their own (no step waits on Kubernetes). A run resumed from a checkpoint
(``train(resume_from_checkpoint=...)``) reports the step it went back to, saved when its
``trainer_state.json`` was written. Every pod's first rank writes its pod's heartbeat,
and a step after which the Trainer saves or evaluates announces a pause, so the
operator's hang detection does not take it for a stall.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from gpuhealth.distribution import install_hint

try:
    from transformers import TrainerCallback
except ImportError as missing:
    raise ImportError(
        f"pitcrew.client.hf needs Hugging Face transformers: {install_hint('hf')} ({missing})"
    ) from missing

# After the check, so that a job without the extra reads which extra it is.
from pitcrew.client.distributed import WRITE_WAIT, TrainingReporter, guarded


class PitcrewTrainerCallback(TrainerCallback):  # type: ignore[misc]  # untyped here
    def __init__(self, *, min_interval: float = 30.0, tokens_per_step: int | None = None) -> None:
        self.min_interval = min_interval
        self.tokens_per_step = tokens_per_step
        self.reporter: TrainingReporter | None = None
        self.flos = (0.0, 0)
        """``state.total_flos`` and the step when it last grew."""

    @guarded
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model = kwargs.get("model")
        if self.reporter is not None or model is None:
            return
        self.reporter = TrainingReporter(
            model,
            min_interval=self.min_interval,
            tokens_per_step=self.tokens_per_step,
        )
        self.flos = (float(state.total_flos), int(state.global_step))
        step = int(state.global_step)
        if step > 0:  # resumed: the Trainer loaded its state from a checkpoint
            saved = Path(args.output_dir) / f"checkpoint-{step}" / "trainer_state.json"
            if saved.exists():
                at = datetime.datetime.fromtimestamp(saved.stat().st_mtime, datetime.UTC)
                self.reporter.resumed(step, at)

    @guarded
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.reporter is not None:
            self.reporter.flush(WRITE_WAIT)

    @guarded
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.reporter is not None:
            self.reporter.step(int(state.global_step))
            if control.should_save or control.should_evaluate:
                # The Trainer saves or evaluates right after this hook: no steps meanwhile.
                self.reporter.pause()

    @guarded
    def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flops(state)

    @guarded
    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flops(state)
        if self.reporter is not None:
            self.reporter.checkpoint(int(state.global_step))

    def _flops(self, state: Any) -> None:
        """The Trainer adds up its FLOPs (``store_flos``) just before it logs or saves:
        what it added over the steps since is the FLOPs of a step."""
        total, step = float(state.total_flos), int(state.global_step)
        counted, since = self.flos
        if self.reporter is not None and total > counted and step > since:
            self.reporter.flops((total - counted) / (step - since))
            self.flos = (total, step)
