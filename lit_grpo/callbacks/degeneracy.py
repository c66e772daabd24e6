"""DegeneracyMonitor: how many groups carry no signal, against what i.i.d. sampling predicts."""

from __future__ import annotations

from typing import ClassVar

import torch
from lightning import LightningModule, Trainer

from lit_grpo.callbacks._logging import log_step
from lit_grpo.callbacks._requirements import check_binary_rewards, require_run
from lit_grpo.callbacks._rollouts import RolloutStatsCallback, fresh_rewards, gather
from lit_grpo.callbacks._schedule import due_step
from lit_grpo.checks import require, require_at_least
from lit_grpo.diagnostics.degeneracy import (
    EMASuccessTracker,
    degeneracy_summary,
    degenerate_groups,
    iid_degeneracy,
    starved_fraction,
    unbiased_iid_degeneracy,
)
from lit_grpo.types import PromptBatch, RolloutStats

NAME = "DegeneracyMonitor"


class DegeneracyMonitor(RolloutStatsCallback):
    """Degenerate groups per training step and their i.i.d. predictions (METHODS.md section 3).

    A group is degenerate when its scorable rewards are all equal within ``atol`` (never a test of
    ``std == 0``); every centred estimator gives it zero advantage. Each step's observed rate is set
    against the pooled i.i.d. prediction ``f(p) = p^G + (1 - p)^G`` at the step's pooled success rate
    and against a per-prompt one from an exponential moving average of each prompt's earlier visits
    (biased upwards: ``f`` is convex and the rates are noisy). With ``resample_every_n_steps`` the
    callback also draws, before the step's own sampling, ``resample_samples`` (``n >= G``) fresh
    completions of each prompt and predicts its degeneracy without bias from its ``c`` correct of ``n``:
    ``(C(c, G) + C(n - c, G)) / C(n, G)`` (on one process only). Needs binary rewards; with
    ``filter_degenerate`` the kept groups are never degenerate. The scalars are listed in ``metrics``
    and explained in docs/diagnostics.md.

    Args:
        atol: Two rewards closer than this are equal; also the tolerance of "0 or 1".
        ema_decay: Weight of a prompt's previous estimate in the moving average, in [0, 1).
        resample_every_n_steps: Draw the fresh samples at steps ``0, n, 2n, ...`` (0: never).
        resample_samples: Fresh completions per prompt (at least the group size; 16 or more).
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "rollout/degenerate_frac",
        "rollout/all_correct_frac",
        "rollout/all_wrong_frac",
        "rollout/pooled_success_rate",
        "rollout/degenerate_iid_pred",
        "rollout/degenerate_excess",
        "rollout/degenerate_ema_pred",
        "rollout/degenerate_ema_excess",
        "rollout/ema_coverage",
        "rollout/starved_frac",
        "rollout/degenerate_resample_pred",
        "rollout/degenerate_resample_excess",
        "rollout/resample_success_rate",
        "rollout/degenerate_resample_pooled_pred",
        "rollout/resample_prompts",
    )

    def __init__(
        self,
        atol: float = 1e-6,
        ema_decay: float = 0.5,
        resample_every_n_steps: int = 0,
        resample_samples: int = 16,
    ) -> None:
        require(atol >= 0, f"DegeneracyMonitor: atol={atol} must be >= 0, e.g. 1e-6")
        require_at_least(NAME, 0, " (0: never)", resample_every_n_steps=resample_every_n_steps)
        require(
            resample_samples >= 2,
            f"DegeneracyMonitor: resample_samples={resample_samples} must be >= 2 (e.g. 16)",
        )
        self.atol = atol
        self.tracker = EMASuccessTracker(ema_decay)  # validates ema_decay
        self.resample_every_n_steps, self.resample_samples = resample_every_n_steps, resample_samples
        self._resampled: tuple[list[str], torch.Tensor] | None = None  # ids and [P, n] rewards of this step

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            require_run(NAME, trainer, pl_module, "estimator", "group_size", binary=True)
            require(not self.resample_every_n_steps or self.resample_samples >= pl_module.group_size,
                    f"DegeneracyMonitor: resample_samples={self.resample_samples} is below the group size "
                    f"{pl_module.group_size}; the unbiased prediction needs n >= G samples per prompt")

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch, batch_idx: int
    ) -> None:
        self._resampled = None
        if due_step(trainer, self.resample_every_n_steps) is None or not isinstance(batch, PromptBatch):
            return
        # [P, n]
        rewards = fresh_rewards(NAME, pl_module, batch, self.resample_samples, self.atol).double().cpu()
        self._resampled = (list(batch.ids), rewards)

    def resample_metrics(self, ids: list[str], rewards: torch.Tensor, G: int) -> dict[str, float]:
        """The fresh samples' predictions against the step's observed degeneracy on the same prompts.

        ``ids``, ``rewards [P, G]``: the step's groups; the fresh samples are those drawn at the start.
        """
        fresh_ids, fresh = self._resampled
        row = {key: i for i, key in enumerate(fresh_ids)}
        observed = degenerate_groups(rewards, self.atol)["degenerate"].double()  # [P]
        preds, seen, correct, scorable = [], [], 0.0, 0
        for i, key in enumerate(ids):
            if key not in row:
                continue
            values = fresh[row[key]]
            values = values[~values.isnan()].round()  # [n_x]
            correct, scorable = correct + values.sum().item(), scorable + values.numel()
            if values.numel() >= G:
                preds.append(unbiased_iid_degeneracy(values.numel(), int(values.sum().item()), G))
                seen.append(observed[i].item())
        if not preds:
            return {}
        pbar = correct / scorable
        pred = sum(preds) / len(preds)
        return {
            "rollout/degenerate_resample_pred": pred,
            "rollout/degenerate_resample_excess": sum(seen) / len(seen) - pred,
            "rollout/resample_success_rate": pbar,
            "rollout/degenerate_resample_pooled_pred": iid_degeneracy(pbar, G),
            "rollout/resample_prompts": float(len(preds)),
        }

    def on_rollout_stats(self, trainer: Trainer, pl_module: LightningModule, stats: RolloutStats) -> None:
        check_binary_rewards(NAME, stats.rewards, self.atol)
        metrics = self.step_metrics(pl_module, stats.batch.ids, stats.rewards, stats.advantages)
        if self._resampled is not None and pl_module.trainer.world_size == 1:
            metrics.update(self.resample_metrics(list(stats.batch.ids), stats.rewards, stats.group_size))
        self._resampled = None
        log_step(trainer, metrics)

    def step_metrics(
        self, pl_module: LightningModule, ids: list[str], rewards: torch.Tensor, advantages: torch.Tensor
    ) -> dict[str, float]:
        """The metrics of one step (rewards and advantages ``[P, G]`` of this process), then the EMA
        update."""
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
