"""When a callback measures and logs: the logging step of the current batch and the cadences over it."""

from __future__ import annotations

from lightning import Trainer


def logging_step(trainer: Trainer) -> int:
    """The step Lightning logs the current training batch's metrics under (batches that stepped so far)."""
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    return int(getattr(loop, "_batches_that_stepped", trainer.global_step))


def every(step: int, n: int) -> bool:
    """Whether ``step`` is one of ``0, n, 2n, ...``."""
    return n > 0 and step % n == 0


def due_step(trainer: Trainer, n: int) -> int | None:
    """This batch's logging step when it is one of ``0, n, 2n, ...`` (a measurement is due), else None."""
    step = logging_step(trainer)
    return step if every(step, n) else None


def log_this_step(trainer: Trainer, step: int) -> bool:
    """Lightning's ``log_every_n_steps`` rule, for callbacks that log every step."""
    return (step + 1) % max(trainer.log_every_n_steps, 1) == 0
