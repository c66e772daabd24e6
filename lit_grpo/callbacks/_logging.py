"""Where a callback writes: scalars and tables to every logger, figures to the TensorBoard writer."""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning import Trainer
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

from lit_grpo.callbacks._schedule import log_this_step, logging_step

log = logging.getLogger(__name__)
_warned: set[str] = set()


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


def log_table(trainer: Trainer, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], step: int,
              markdown: str) -> None:
    """A table to every logger of the run, on global rank 0, each the way it keeps tables: TensorBoard as the
    text ``markdown`` under ``key``; Weights & Biases as a ``wandb.Table``; MLflow as a JSON table artifact
    ``<key>/step_<step>.json``; CSV as rows of ``<log_dir>/<key>.csv`` (``/`` in the key as ``_``) with a
    ``step`` column. A logger with no tables of its own is told once, in the log, that it gets none."""
    if not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        _table(logger, key, list(columns), [list(r) for r in rows], step, markdown)


def _table(logger: Logger, key: str, columns: list[str], rows: list[list], step: int, markdown: str) -> None:
    if isinstance(logger, TensorBoardLogger):
        logger.experiment.add_text(key, markdown, global_step=step)
    elif isinstance(logger, WandbLogger):
        logger.log_table(key=key, columns=columns, data=rows, step=step)
    elif isinstance(logger, MLFlowLogger):
        table = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
        logger.experiment.log_table(logger.run_id, data=table, artifact_file=f"{key}/step_{step}.json")
    elif isinstance(logger, CSVLogger):
        path = Path(logger.log_dir) / f"{key.replace('/', '_')}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(["step", *columns])
            writer.writerows([step, *r] for r in rows)
    elif type(logger).__name__ not in _warned:
        _warned.add(type(logger).__name__)
        log.warning("%s keeps no tables: %s is not written to it (TensorBoard, W&B, MLflow and CSV loggers "
                    "get it)", type(logger).__name__, key)
