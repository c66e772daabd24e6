"""Helpers shared by the diagnostic callbacks: what a run must provide, the gradient probe's settings,
gathering, logging."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch
from lightning import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from lit_grpo.checks import require
from lit_grpo.diagnostics.gradients import LinearTarget, select_linear_targets
from lit_grpo.types import RolloutStats


@dataclass
class GradientProbe:
    """How the gradient callbacks (GradientRank, GradientBudget, ShadowEstimators, GradientFidelity) take
    per-completion gradients ``grad sum_t log pi(y_i,t)``: over which parameters, projected or whole, in what
    micro-batches. In YAML: ``probe: {params: ['layers\\.2\\.mlp\\.'], projection_dim: 4096}``.

    Args:
        params: Regular expressions searched in parameter names (e.g. ``["layers\\.1\\.mlp"]``); only
            ``nn.Linear`` weights and biases count. Null: every Linear weight (not one tied to an embedding).
        lora: Use the LoRA parameters (``lora_`` in the name) instead of ``params``.
        projection_dim: Project each row to this many dimensions with a fixed Gaussian matrix drawn chunk-wise
            from ``seed`` (null: keep rows whole). Drawing costs ``D x projection_dim`` normal numbers per
            measurement.
        seed: Seed of the projection (GradientFidelity also draws its subsamples from it).
        micro_batch_size: Completions per forward of the measurement (null: all at once).
    """

    params: list[str] | None = None
    lora: bool = False
    projection_dim: int | None = None
    seed: int = 0
    micro_batch_size: int | None = None

    def __post_init__(self) -> None:
        require(not (self.lora and self.params), f"probe: give either lora: true or params: {self.params}, not both")
        require(
            self.projection_dim is None or self.projection_dim >= 1,
            f"probe.projection_dim={self.projection_dim} must be >= 1 or null (no projection)",
        )
        require(
            self.micro_batch_size is None or self.micro_batch_size >= 1,
            f"probe.micro_batch_size={self.micro_batch_size} must be >= 1 or null (all at once)",
        )
        for pattern in self.params or []:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"probe.params: {pattern!r} is not a regular expression ({err})") from err

    def targets(self, name: str, policy: nn.Module) -> list[LinearTarget]:
        """The chosen ``nn.Linear`` layers of ``policy``; a ValueError naming callback ``name`` when there are none."""
        targets, left_out = select_linear_targets(policy, self.params, self.lora)
        if not targets:
            names = [n for n, _ in policy.named_parameters()][:6]
            what = "probe.lora=True" if self.lora else f"probe.params={self.params}"
            raise ValueError(
                f"{name}: {what} chooses no trainable nn.Linear parameter of the policy; parameter names look "
                f"like {names}; fix the patterns (regular expressions searched in these names)"
            )
        if left_out:
            rank_zero_warn(
                f"{name}: leaving out {len(left_out)} matched parameters that are not the weight or bias of a "
                f"trainable nn.Linear (e.g. {left_out[:3]})"
            )
        return targets


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


def require_run(
    name: str,
    trainer: Trainer,
    pl_module: LightningModule,
    *attributes: str,
    writer: bool = False,
    figure_option: str | None = None,
    binary: bool = False,
) -> None:
    """At setup: ``require_module``, with ``binary`` also ``require_binary_reward``, then ``require_logger``."""
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
    if writer and not any(isinstance(lg, TensorBoardLogger) for lg in trainer.loggers):
        other = f"set {name}'s {figure_option}" if figure_option else f"remove {name}"
        raise ValueError(
            f"{name} writes TensorBoard text and figures but the Trainer has no TensorBoardLogger "
            f"(it has {', '.join(type(lg).__name__ for lg in trainer.loggers)}); add "
            f"lightning.pytorch.loggers.TensorBoardLogger to trainer.logger or {other}"
        )


def require_whole_gradients(name: str, trainer: Trainer, fix: str) -> None:
    """ValueError under FSDPStrategy (FSDP1), whose parameters and gradients are flat local shards; ``fix`` ends
    the message."""
    from lightning.pytorch.strategies import FSDPStrategy

    require(
        not isinstance(trainer.strategy, FSDPStrategy),
        f"{name} needs whole per-parameter gradients, which FSDPStrategy (FSDP1) does not expose; {fix}",
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
    require(reward is None or reward_is_binary(reward) is not False,
            f"{name} needs binary rewards (0 or 1), but the run's reward {type(reward).__name__} is not binary; "
            f"use a binary reward such as lit_grpo.ExactMatch or lit_grpo.MathVerify, or remove {name}")


def non_binary(rewards: Tensor, atol: float) -> Tensor:
    """The scorable rewards that are neither 0 nor 1 (within ``atol``), in float64: ``[M]``."""
    values = rewards[~rewards.isnan()].double()
    return values[((values - 0).abs() > atol) & ((values - 1).abs() > atol)]


def check_binary_rewards(name: str, rewards: Tensor, atol: float) -> None:
    """ValueError when a scorable reward is neither 0 nor 1 (within ``atol``)."""
    bad = non_binary(rewards, atol)
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


def log_step(trainer: Trainer, metrics: dict[str, float]) -> int:
    """Log ``metrics`` at this batch's logging step when ``log_every_n_steps`` says so; returns the step."""
    step = logging_step(trainer)
    if log_this_step(trainer, step):
        log_scalars(trainer, metrics, step)
    return step


def due_step(trainer: Trainer, n: int) -> int | None:
    """This batch's logging step when it is one of ``0, n, 2n, ...`` (a measurement is due), else None."""
    step = logging_step(trainer)
    return step if every(step, n) else None


def add_figure(writer: Any | None, tag: str, fig: Any | None, step: int) -> None:
    """Write ``fig`` (None without matplotlib) to the TensorBoard ``writer`` (None off rank 0) as ``tag``."""
    if writer is not None and fig is not None:
        writer.add_figure(tag, fig, global_step=step)


def log_this_step(trainer: Trainer, step: int) -> bool:
    """Lightning's ``log_every_n_steps`` rule, for callbacks that log every step."""
    return (step + 1) % max(trainer.log_every_n_steps, 1) == 0


def fork_rng(pl_module: LightningModule):
    """A context that restores the global RNG states on exit, so a callback never changes training."""
    device = pl_module.device
    return torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else [])


def fresh_rewards(name: str, pl_module: LightningModule, batch: Any, n: int, atol: float) -> Tensor:
    """``[P, n]`` binary rewards (checked within ``atol``) of ``n`` new completions per prompt of ``batch``
    from the current policy, without gradients and with the RNG left as it was."""
    with torch.no_grad(), fork_rng(pl_module):
        rollouts = pl_module.engine.rollout(batch, n, pl_module.sampling)
    rewards = pl_module.score(batch, rollouts)[0]
    check_binary_rewards(name, rewards, atol)
    return rewards


class RolloutStatsCallback(Callback):
    """A callback that measures the ``RolloutStats`` of every training step with prompts in
    ``on_rollout_stats``."""

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        stats = rollout_stats(outputs)
        if stats is not None and stats.rewards.shape[0]:
            self.on_rollout_stats(trainer, pl_module, stats)

    def on_rollout_stats(self, trainer: Trainer, pl_module: LightningModule, stats: RolloutStats) -> None:
        raise NotImplementedError
