"""DegeneracyMonitor: how many groups carry no signal, against what i.i.d. sampling predicts."""

from __future__ import annotations

import torch
from lightning import Callback, LightningModule, Trainer

from callbacks._common import (
    check_binary_rewards,
    gather,
    log_scalars,
    log_this_step,
    logging_step,
    require_binary_reward,
    require_logger,
    require_module,
    rollout_stats,
)
from lit_grpo.diagnostics.degeneracy import (
    EMASuccessTracker,
    degeneracy_summary,
    degenerate_groups,
    iid_degeneracy,
    starved_fraction,
)

NAME = "DegeneracyMonitor"


class DegeneracyMonitor(Callback):
    """Degenerate groups per training step and their i.i.d. predictions (METHODS.md section 3).

    A group is degenerate when its scorable rewards are all equal within ``atol`` (never a test of
    ``std == 0``); every centred estimator gives it zero advantage. For binary rewards and group size
    ``G`` the pooled prediction is ``f(p) = p^G + (1 - p)^G`` at the step's pooled success rate;
    prompts of different difficulty make the observed rate exceed it (``f`` is convex). The
    per-prompt prediction uses an independent estimate of each prompt's pass rate: an exponential
    moving average of its earlier visits (this step's rewards are folded in only afterwards).
    Needs binary rewards. With ``filter_degenerate`` the kept groups are never degenerate.

    Writes every step:

    - ``rollout/degenerate_frac``, ``rollout/all_correct_frac``, ``rollout/all_wrong_frac``
    - ``rollout/pooled_success_rate``, ``rollout/degenerate_iid_pred`` (pooled prediction) and
      ``rollout/degenerate_excess`` (observed minus predicted)
    - ``rollout/degenerate_ema_pred``: mean ``f(p_x)`` over the step's prompts seen before, ``p_x``
      their moving-average pass rate; ``rollout/degenerate_ema_excess``: observed rate on those
      prompts minus that prediction; ``rollout/ema_coverage``: share of prompts seen before (the two
      before are left out while it is 0)
    - ``rollout/starved_frac``: share of scorable completions whose advantage is exactly 0

    Args:
        atol: Two rewards closer than this are equal; also the tolerance of "0 or 1".
        ema_decay: Weight of a prompt's previous estimate in the moving average, in [0, 1).
    """

    def __init__(self, atol: float = 1e-6, ema_decay: float = 0.5) -> None:
        if atol < 0:
            raise ValueError(f"DegeneracyMonitor: atol={atol} must be >= 0, e.g. 1e-6")
        self.atol = atol
        self.tracker = EMASuccessTracker(ema_decay)  # validates ema_decay

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            require_module(NAME, pl_module, "estimator", "group_size")
            require_binary_reward(NAME, pl_module)
            require_logger(NAME, trainer)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        stats = rollout_stats(outputs)
        if stats is None or stats.rewards.shape[0] == 0:
            return
        check_binary_rewards(NAME, stats.rewards, self.atol)
        metrics = self.step_metrics(pl_module, stats.batch.ids, stats.rewards, stats.advantages)
        step = logging_step(trainer)
        if log_this_step(trainer, step):
            log_scalars(trainer, metrics, step)

    def step_metrics(
        self, pl_module: LightningModule, ids: list[str], rewards: torch.Tensor, advantages: torch.Tensor
    ) -> dict[str, float]:
        """The metrics of one step (rewards and advantages ``[P, G]`` of this process), then the EMA update."""
        G = rewards.shape[1]
        scorable = ~rewards.isnan()  # [P, G]
        rate = (rewards.nan_to_num(0.0) * scorable).sum(-1) / scorable.sum(-1)  # [P], NaN when none
        prior = self.tracker.get(ids)  # [P] earlier visits only
        self.tracker.update(ids, rate)
        observed = degenerate_groups(rewards, self.atol)["degenerate"].double()  # [P]
        local = torch.stack([prior, iid_degeneracy(prior, G), observed], dim=1)  # [P, 3]
        everything = gather(pl_module, torch.cat([rewards.double(), advantages.double(), local], dim=1))
        all_rewards, all_adv = everything[:, :G], everything[:, G : 2 * G]
        prior, pred, observed = everything[:, 2 * G :].unbind(-1)  # [P_all] each
        metrics = {f"rollout/{k}": v for k, v in degeneracy_summary(all_rewards, self.atol).items()}
        seen = ~prior.isnan()
        metrics["rollout/ema_coverage"] = seen.double().mean().item()
        if bool(seen.any()):
            metrics["rollout/degenerate_ema_pred"] = pred[seen].mean().item()
            metrics["rollout/degenerate_ema_excess"] = (observed[seen] - pred[seen]).mean().item()
        metrics["rollout/starved_frac"] = starved_fraction(all_adv, ~all_rewards.isnan())
        return metrics

    def state_dict(self) -> dict:
        return {"tracker": self.tracker.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.tracker.load_state_dict(state_dict["tracker"])
