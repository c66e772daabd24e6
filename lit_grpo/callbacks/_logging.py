"""Where a callback writes: scalars to every logger, text and figures to the TensorBoard writer."""

from __future__ import annotations

import math
from typing import Any

from lightning import Trainer
from lightning.pytorch.loggers import TensorBoardLogger

from lit_grpo.callbacks._schedule import log_this_step, logging_step


def tensorboard(trainer: Trainer) -> Any | None:
    """The ``SummaryWriter`` of the run's first TensorBoard logger, on global rank 0 only."""
    if not trainer.is_global_zero:
        return None
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.experiment
    return None


def log_scalars(trainer: Trainer, metrics: dict[str, float], step: int) -> None:
    """Write the finite values to every logger at ``step``; NaN means "nothing to measure" and is left out.

    The values go straight to the loggers: ``LightningModule.log`` would repeat a value at later steps
    where it was not measured (a cadence, a bin without prompts).
    """
    finite = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(v)}
    if finite and trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(finite, step=step)


def log_step(trainer: Trainer, metrics: dict[str, float]) -> int:
    """Log ``metrics`` at this batch's logging step when ``log_every_n_steps`` says so; returns the step."""
    step = logging_step(trainer)
    if log_this_step(trainer, step):
        log_scalars(trainer, metrics, step)
    return step


def add_figure(writer: Any | None, tag: str, fig: Any | None, step: int) -> None:
    """Write ``fig`` (None without matplotlib) to the TensorBoard ``writer`` (None off rank 0) as ``tag``."""
    if writer is not None and fig is not None:
        writer.add_figure(tag, fig, global_step=step)
