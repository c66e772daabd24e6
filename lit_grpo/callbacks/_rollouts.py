"""What a callback reads of the training step's rollouts, and how it draws and gathers its own."""

from __future__ import annotations

from typing import Any

import torch
from lightning import Callback, LightningModule, Trainer
from torch import Tensor

from lit_grpo.callbacks._requirements import check_binary_rewards
from lit_grpo.types import RolloutStats


def rollout_stats(outputs: Any) -> RolloutStats | None:
    """The ``RolloutStats`` a ``GRPOModule.training_step`` returned, or ``None``."""
    stats = outputs.get("rollout") if isinstance(outputs, dict) else None
    return stats if isinstance(stats, RolloutStats) else None


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
