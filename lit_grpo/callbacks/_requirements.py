"""What a run must provide for a callback, checked at setup: a lit-grpo module, a logger, whole gradients,
binary rewards."""

from __future__ import annotations

from typing import Any

from lightning import LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from lit_grpo.checks import require


def require_module(name: str, pl_module: LightningModule, *attributes: str) -> None:
    """TypeError unless ``pl_module`` has ``attributes`` (a lit-grpo ``GRPOModule`` has them all)."""
    missing = [a for a in attributes if not hasattr(pl_module, a)]
    if missing:
        raise TypeError(
            f"{name} needs a lit_grpo GRPOModule (missing {', '.join(missing)} on "
            f"{type(pl_module).__name__}); use model: lit_grpo.GRPOModule or remove {name} from the callbacks"
        )


def require_run(
    name: str,
    trainer: Trainer,
    pl_module: LightningModule,
    *attributes: str,
    writer: bool = False,
    figure_option: str | None = None,
    binary: bool = False,
) -> None:
    """At setup: ``require_module``, with ``binary`` also ``require_binary_reward``, then
    ``require_logger``."""
    require_module(name, pl_module, *attributes)
    if binary:
        require_binary_reward(name, pl_module)
    require_logger(name, trainer, writer, figure_option)


def require_logger(
    name: str, trainer: Trainer, writer: bool = False, figure_option: str | None = None
) -> None:
    """ValueError when the run has no logger, or (``writer``) no TensorBoard logger for text and figures.

    ``figure_option`` names the callback's option that turns its figures off, offered as a fix.
    """
    require(bool(trainer.loggers),
            f"{name} logs metrics but the Trainer has no logger (logger=False); set trainer.logger to a "
            f"lightning.pytorch.loggers.TensorBoardLogger (the lit-grpo CLI default) or remove {name}")
    other = f"set {name}'s {figure_option}" if figure_option else f"remove {name}"
    require(
        not writer or any(isinstance(lg, TensorBoardLogger) for lg in trainer.loggers),
        f"{name} writes TensorBoard text and figures but the Trainer has no TensorBoardLogger "
        f"(it has {', '.join(type(lg).__name__ for lg in trainer.loggers)}); add "
        f"lightning.pytorch.loggers.TensorBoardLogger to trainer.logger or {other}",
    )


def require_whole_gradients(name: str, trainer: Trainer, fix: str) -> None:
    """ValueError under FSDPStrategy (FSDP1), whose parameters and gradients are flat local shards; ``fix``
    ends the message."""
    from lightning.pytorch.strategies import FSDPStrategy

    require(
        not isinstance(trainer.strategy, FSDPStrategy),
        f"{name} needs whole per-parameter gradients, which FSDPStrategy (FSDP1) does not expose; {fix}",
    )


def reward_is_binary(reward: Any) -> bool | None:
    """Whether a reward function only scores 0 or 1 (its ``binary`` attribute, see ``RewardFunction.binary``):
    ``True``/``False`` when the reward declares it, ``None`` otherwise."""
    declared = getattr(reward, "binary", None)
    return declared if isinstance(declared, bool) else None


def require_binary_reward(name: str, pl_module: LightningModule) -> None:
    """ValueError at setup when the module's reward is known not to be binary."""
    reward = getattr(pl_module, "reward", None)
    require(
        reward is None or reward_is_binary(reward) is not False,
        f"{name} needs binary rewards (0 or 1), but the run's reward {type(reward).__name__} is not binary; "
        f"use a binary reward such as lit_grpo.ExactMatch or lit_grpo.MathVerify, or remove {name}",
    )


def non_binary(rewards: Tensor, atol: float) -> Tensor:
    """The scorable rewards that are neither 0 nor 1 (within ``atol``), in float64: ``[M]``."""
    values = rewards[~rewards.isnan()].double()
    return values[((values - 0).abs() > atol) & ((values - 1).abs() > atol)]


def check_binary_rewards(name: str, rewards: Tensor, atol: float) -> None:
    """ValueError when a scorable reward is neither 0 nor 1 (within ``atol``)."""
    bad = non_binary(rewards, atol)
    first = f"{bad[0].item():g}" if bad.numel() else ""
    require(not bad.numel(),
            f"{name} needs binary rewards (0 or 1) but got the value {first}; use a binary reward "
            f"such as lit_grpo.ExactMatch or lit_grpo.MathVerify, or remove {name} from the callbacks")
