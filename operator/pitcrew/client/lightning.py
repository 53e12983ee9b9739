"""Pitcrew for PyTorch Lightning: one callback, no other change to the training code.

::

    from pitcrew.client.lightning import PitcrewCallback

    trainer = lightning.Trainer(..., callbacks=[PitcrewCallback()])

It is a Callback of both Lightning packages, ``lightning`` (``lightning.pytorch``)
and the older ``pytorch_lightning``, whichever are installed: a Trainer of either
takes it.

Rank 0 then writes the ``pitcrew.dev/progress`` annotation on its pod (``pip install
'pitcrew-operator[lightning]'``; the pod needs ``POD_NAME``/``POD_NAMESPACE`` and ``NODE_NAME``
from the downward API and ``patch`` on its own pod): the optimizer step Lightning is
at, each checkpoint once it is saved, the model's parameters, the FLOPs of one
optimizer step (counted once, by ``torch.utils.flop_counter`` on one batch, times the
ranks), and every rank's compute time, gathered as
:class:`~pitcrew.client.distributed.TrainingReporter` does: the time from the start
of a batch to its backward pass, less the parameter all-gathers of the FSDP strategy's
units, where a fast rank waits for the slow one. Writes happen on a
thread of their own (no step waits on Kubernetes). A run resumed from a checkpoint
(``fit(ckpt_path=...)``) reports the checkpoint it went back to, with the time the
callback stored in it when it was saved. Every pod's first rank writes its pod's
heartbeat, and a checkpoint being saved or a validation running is announced as a
pause, so the operator's hang detection does not take it for a stall.
"""

from __future__ import annotations

import datetime
import importlib
from pathlib import Path
from typing import Any

from gpuhealth.distribution import install_hint

PACKAGES = ("lightning.pytorch", "pytorch_lightning")
"""Lightning's two import paths: the ``lightning`` package, and the older standalone
``pytorch_lightning``."""


def _callback_bases() -> tuple[type, ...]:
    """The ``Callback`` class of each Lightning package installed."""
    found, missing = [], []
    for name in PACKAGES:
        try:
            found.append(importlib.import_module(name).Callback)
        except ImportError as error:
            missing.append(str(error))
    if not found:
        raise ImportError(
            f"pitcrew.client.lightning needs Lightning: {install_hint('lightning')} "
            f"({'; '.join(missing)})"
        )
    return tuple(found)


_BASES = _callback_bases()
try:
    from torch.utils.flop_counter import FlopCounterMode
except ImportError as missing:
    raise ImportError(
        f"pitcrew.client.lightning needs Lightning: {install_hint('lightning')} ({missing})"
    ) from missing

# After the check, so that a job without the extra reads which extra it is.
from pitcrew.client.distributed import WRITE_WAIT, TrainingReporter, guarded  # noqa: E402

SAVED_AT = "pitcrew_saved_at"
"""Where the callback keeps, in each checkpoint, the time it was saved."""
_Callback: Any = type("_Callback", _BASES, {})

FLOPS_BATCH = 2
"""The batch whose FLOPs are counted: the first may compile or warm caches."""


class PitcrewCallback(_Callback):  # type: ignore[misc]  # the bases are found at import
    def __init__(
        self,
        *,
        min_interval: float = 30.0,
        tokens_per_step: int | None = None,
        flops_per_step: float | None = None,
    ) -> None:
        """``flops_per_step``: the model FLOPs of one optimizer step, all ranks together,
        if known better than one counted batch; ``tokens_per_step`` for the 6·N·tokens
        estimate instead."""
        super().__init__()
        self.min_interval = min_interval
        self.tokens_per_step = tokens_per_step
        self.flops_per_step = flops_per_step
        self.reporter: TrainingReporter | None = None
        self.last_step = -1
        self.batches = 0
        self.counter: FlopCounterMode | None = None
        self.saved: int | None = None
        """The step of a checkpoint being written: reported once it is on disk."""
        self.restored: tuple[int, datetime.datetime] | None = None
        """The checkpoint a resumed run loaded: its step and when it was saved."""

    @guarded
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or self.reporter is not None:
            return
        self.reporter = TrainingReporter(
            min_interval=self.min_interval,
            parameters=sum(p.numel() for p in pl_module.parameters()),
            tokens_per_step=self.tokens_per_step,
            flops_per_step=self.flops_per_step,
        )

    @guarded
    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
        step = int(checkpoint.get("global_step", 0))
        saved = checkpoint.get(SAVED_AT)
        if saved:
            at = datetime.datetime.fromisoformat(saved)
        elif trainer.ckpt_path and Path(trainer.ckpt_path).exists():
            # Saved before this callback kept the time: the file's is as good.
            at = datetime.datetime.fromtimestamp(
                Path(trainer.ckpt_path).stat().st_mtime, datetime.UTC
            )
        else:
            return
        self.restored = (step, at)

    @guarded
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.reporter is not None:
            # The strategy has wrapped the model by now: FSDP's all-gathers are waits.
            self.reporter.timer.exclude(trainer.model)
            if self.restored is not None:
                self.reporter.resumed(*self.restored)
        self.restored = None

    @guarded
    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._saved()
        if self.reporter is None:
            return
        self.batches += 1
        if self.batches == FLOPS_BATCH and self.flops_per_step is None:
            self.counter = FlopCounterMode(display=False)
            self.counter.__enter__()
        self.reporter.timer.start()

    @guarded
    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self.reporter is not None:
            self.reporter.timer.stop()

    @guarded
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.reporter is None:
            return
        if self.counter is not None:
            counter, self.counter = self.counter, None
            counter.__exit__(None, None, None)
            flops = counter.get_total_flops() * trainer.accumulate_grad_batches
            self.reporter.flops(float(flops * trainer.world_size))
        step = int(trainer.global_step)
        if step != self.last_step:  # an optimizer step, not a micro-batch of one
            self.last_step = step
            self.reporter.step(step)

    @guarded
    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
        self.saved = int(trainer.global_step)
        if self.reporter is not None:
            self.reporter.pause()  # the checkpoint is being written: no steps meanwhile
        checkpoint[SAVED_AT] = datetime.datetime.now(datetime.UTC).isoformat()

    @guarded
    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self.reporter is not None:
            self.reporter.pause()  # no steps until the validation ends

    @guarded
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._saved()
        if self.reporter is not None:
            self.reporter.flush(WRITE_WAIT)

    def _saved(self) -> None:
        """A checkpoint begun is reported when training goes on (or ends) after it."""
        if self.saved is not None and self.reporter is not None:
            self.reporter.checkpoint(self.saved)
        self.saved = None
