"""Helpers shared by the diagnostic callbacks: what a run must provide, gathering, logging."""

from __future__ import annotations

import math
from typing import Any

import torch
from lightning import LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from lit_grpo.types import RolloutStats


def rollout_stats(outputs: Any) -> RolloutStats | None:
    """The ``RolloutStats`` a ``GRPOModule.training_step`` returned, or ``None``."""
    stats = outputs.get("rollout") if isinstance(outputs, dict) else None
    return stats if isinstance(stats, RolloutStats) else None


def require_module(name: str, pl_module: LightningModule, *attributes: str) -> None:
    """TypeError unless ``pl_module`` has ``attributes`` (a lit-grpo ``GRPOModule`` has them all)."""
    missing = [a for a in attributes if not hasattr(pl_module, a)]
    if missing:
        raise TypeError(
            f"{name} needs a lit_grpo GRPOModule (missing {', '.join(missing)} on {type(pl_module).__name__}); "
            f"use model: lit_grpo.GRPOModule or remove {name} from the callbacks"
        )


def require_logger(
    name: str, trainer: Trainer, writer: bool = False, figure_option: str | None = None
) -> None:
    """ValueError when the run has no logger, or (``writer``) no TensorBoard logger for text and figures.

    ``figure_option`` names the callback's option that turns its figures off, offered as a fix.
    """
    if not trainer.loggers:
        raise ValueError(
            f"{name} logs metrics but the Trainer has no logger (logger=False); set trainer.logger to a "
            f"lightning.pytorch.loggers.TensorBoardLogger (the lit-grpo CLI default) or remove {name}"
        )
    if writer and not any(isinstance(lg, TensorBoardLogger) for lg in trainer.loggers):
        other = f"set {name}'s {figure_option}" if figure_option else f"remove {name}"
        raise ValueError(
            f"{name} writes TensorBoard text and figures but the Trainer has no TensorBoardLogger "
            f"(it has {', '.join(type(lg).__name__ for lg in trainer.loggers)}); add "
            f"lightning.pytorch.loggers.TensorBoardLogger to trainer.logger or {other}"
        )


def tensorboard(trainer: Trainer) -> Any | None:
    """The ``SummaryWriter`` of the run's first TensorBoard logger, on global rank 0 only."""
    if not trainer.is_global_zero:
        return None
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.experiment
    return None


def reward_is_binary(reward: Any) -> bool | None:
    """Whether a reward function only scores 0 or 1 (its ``binary`` attribute, see ``RewardFunction.binary``):
    ``True``/``False`` when the reward declares it, ``None`` otherwise."""
    declared = getattr(reward, "binary", None)
    return declared if isinstance(declared, bool) else None


def require_binary_reward(name: str, pl_module: LightningModule) -> None:
    """ValueError at setup when the module's reward is known not to be binary."""
    reward = getattr(pl_module, "reward", None)
    if reward is not None and reward_is_binary(reward) is False:
        raise ValueError(
            f"{name} needs binary rewards (0 or 1), but the run's reward {type(reward).__name__} is not binary; "
            f"use a binary reward such as lit_grpo.ExactMatch or lit_grpo.MathVerify, or remove {name}"
        )


def check_binary_rewards(name: str, rewards: Tensor, atol: float) -> None:
    """ValueError when a scorable reward is neither 0 nor 1 (within ``atol``)."""
    values = rewards[~rewards.isnan()].double()
    bad = values[((values - 0).abs() > atol) & ((values - 1).abs() > atol)]
    if bad.numel():
        raise ValueError(
            f"{name} needs binary rewards (0 or 1) but got the value {bad[0].item():g}; use a binary reward "
            f"such as lit_grpo.ExactMatch or lit_grpo.MathVerify, or remove {name} from the callbacks"
        )


def gather(pl_module: LightningModule, x: Tensor) -> Tensor:
    """``x [B, ...]`` from every process concatenated along dim 0 (unchanged on one process).

    Processes may hold different ``B`` (e.g. with ``filter_degenerate``): rows are padded to the
    largest ``B`` for the collective and the padding is dropped again.
    """
    if pl_module.trainer.world_size == 1:
        return x
    local = x.to(pl_module.device)
    sizes = pl_module.all_gather(torch.tensor([local.shape[0]], device=local.device)).flatten().tolist()
    pad = int(max(sizes)) - local.shape[0]
    if pad:
        local = torch.cat([local, local.new_zeros(pad, *local.shape[1:])])
    out = pl_module.all_gather(local)  # [W, max B, ...]
    return torch.cat([out[r, : int(s)] for r, s in enumerate(sizes)]).to(x.device)


def logging_step(trainer: Trainer) -> int:
    """The step Lightning logs the current training batch's metrics under (batches that stepped so far)."""
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    return int(getattr(loop, "_batches_that_stepped", trainer.global_step))


def every(step: int, n: int) -> bool:
    """Whether ``step`` is one of ``0, n, 2n, ...``."""
    return n > 0 and step % n == 0


def log_scalars(trainer: Trainer, metrics: dict[str, float], step: int) -> None:
    """Write the finite values to every logger at ``step``; NaN means "nothing to measure" and is left out.

    The values go straight to the loggers: ``LightningModule.log`` would repeat a value at later steps
    where it was not measured (a cadence, a bin without prompts).
    """
    finite = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(v)}
    if finite and trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(finite, step=step)


def log_this_step(trainer: Trainer, step: int) -> bool:
    """Lightning's ``log_every_n_steps`` rule, for callbacks that log every step."""
    return (step + 1) % max(trainer.log_every_n_steps, 1) == 0


def fork_rng(pl_module: LightningModule):
    """A context that restores the global RNG states on exit, so a callback never changes training."""
    device = pl_module.device
    return torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else [])
