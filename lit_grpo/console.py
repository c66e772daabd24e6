"""What a run prints: the run's steps, a model summary without a FLOPs count nobody computed, no library tips.

A GRPO run is counted in optimizer steps (``trainer.max_steps``) over a prompt stream with no epochs, so
Lightning's progress bars, which count the batches of an epoch (``Epoch 0/-2 ... 400/400`` for a 1000-step
run), are replaced by ones that count the run's steps (``Step ... 1000/1000``), and its model summary by one
without the FLOPs column, which reads 0 unless the module defines an example input. :func:`quiet_libraries`
drops, by their exact text, the advertising tips Lightning logs on every run and one deprecation warning
Lightning raises from its own code; nothing else is filtered.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelSummary, RichModelSummary, RichProgressBar, TQDMProgressBar
from lightning.pytorch.callbacks.model_summary import log as summary_log
from lightning.pytorch.utilities.model_summary.model_summary import _format_summary_table

#: The start of the tips Lightning logs on every run (litlogger, litmodels).
TIP = "💡 Tip: For seamless cloud"
#: A deprecation Lightning raises from its own code (lightning.pytorch.utilities._pytree), not the user's.
LIGHTNING_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _NoTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TIP)


def quiet_libraries() -> None:
    """Drops Lightning's advertising tips and its own deprecation warning (idempotent)."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoTips) for f in logger.filters):
            logger.addFilter(_NoTips())
    warnings.filterwarnings("ignore", message=LIGHTNING_DEPRECATION)


def _run_steps(trainer: Trainer, batches: int | float) -> int | float:
    """The run's length in optimizer steps where it has one, else Lightning's count of batches."""
    steps = trainer.max_steps
    return steps if steps is not None and steps > 0 else batches


class StepProgressBar(RichProgressBar):
    """Lightning's rich progress bar counting the run's optimizer steps, once for the whole run."""

    @property
    def total_train_batches(self) -> int | float:
        return _run_steps(self.trainer, super().total_train_batches)

    def _get_train_description(self, current_epoch: int) -> str:
        return f"{'Step':{len(self.validation_description)}}"

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Any) -> None:
        if self.train_progress_bar_id is None:  # one bar for the run: a pass over the stream keeps it
            super().on_train_epoch_start(trainer, pl_module)

    def on_train_batch_end(self, trainer: Trainer, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._update(self.train_progress_bar_id, trainer.global_step)
        self.refresh()


class StepTQDMProgressBar(TQDMProgressBar):
    """Lightning's tqdm progress bar counting the run's optimizer steps, once for the whole run."""

    @property
    def total_train_batches(self) -> int | float:
        return _run_steps(self.trainer, super().total_train_batches)

    def on_train_start(self, trainer: Trainer, pl_module: Any) -> None:
        super().on_train_start(trainer, pl_module)
        self._run_bar_set = False

    def on_train_epoch_start(self, trainer: Trainer, *args: Any) -> None:
        if not self._run_bar_set:  # once per fit: a resumed fit may start past epoch 0
            super().on_train_epoch_start(trainer, *args)
            self.train_progress_bar.set_description("Step")
            self.train_progress_bar.n = trainer.global_step
            self._run_bar_set = True

    def on_train_batch_end(self, trainer: Trainer, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar is not None and self._should_update(trainer.global_step, bar.total):
            bar.n = trainer.global_step
            bar.refresh()
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Any) -> None:
        pass  # the bar spans the run; Lightning closes it at the end of training


class PolicySummary(ModelSummary):
    """Lightning's model summary without the FLOPs column and total (0 unless an example input is set)."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        columns = [column for column in summary_data if column[0] != "FLOPs"]
        table = _format_summary_table(total_parameters, trainable_parameters, model_size,
                                      total_training_modes, total_flops, *columns)
        kept = [line for line in table.splitlines() if "total flops" not in line.lower()]
        summary_log.info("\n" + "\n".join(kept))


#: Lightning's default callbacks (exact types) and what a lit-grpo run prints instead.
REPLACEMENTS = {RichProgressBar: StepProgressBar, TQDMProgressBar: StepTQDMProgressBar,
                RichModelSummary: PolicySummary, ModelSummary: PolicySummary}


def use_run_console(trainer: Trainer) -> None:
    """Swaps Lightning's progress bar and model summary on ``trainer`` (their exact classes: Lightning's
    defaults) for the run-level ones, every setting kept (the replacements add behaviour, no state);
    subclasses and other bars are left as they are."""
    for i, callback in enumerate(trainer.callbacks):
        replacement = REPLACEMENTS.get(type(callback))
        if replacement is not None:
            swapped = replacement.__new__(replacement)
            swapped.__dict__.update(callback.__dict__)
            trainer.callbacks[i] = swapped
