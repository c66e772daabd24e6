"""AdvantageStats: advantage mass by number of correct completions, sign shares, histogram."""

from __future__ import annotations

from typing import ClassVar

import torch
from lightning import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn

from lit_grpo.callbacks._logging import add_figure, log_step, tensorboard
from lit_grpo.callbacks._requirements import non_binary, require_run, reward_is_binary
from lit_grpo.callbacks._rollouts import RolloutStatsCallback, gather
from lit_grpo.callbacks._schedule import every
from lit_grpo.checks import require_at_least
from lit_grpo.diagnostics.budget import advantage_mass, positive_negative_shares
from lit_grpo.diagnostics.plots import bar_figure
from lit_grpo.diagnostics.weight_curve import advantage_mass_by_k
from lit_grpo.types import RolloutStats

NAME = "AdvantageStats"


class AdvantageStats(RolloutStatsCallback):
    """Where the advantage mass sits (METHODS.md section 3, "Advantage mass").

    A group's mass is ``m = sum_i |A_i| / 2``. With binary rewards it is reported per ``K``, the
    number of correct completions of the group (groups with an unscorable completion are left out);
    other rewards skip the per-``K`` metrics with one warning. ``adv/pos_share`` and ``adv/neg_share``
    are written only at steps with a non-zero advantage, so that a mean over the logged steps is never
    pulled towards 0 by fully degenerate steps. Writes the scalars in ``metrics`` every step
    (docs/diagnostics.md explains each), the histogram ``adv/advantages`` every
    ``histogram_every_n_steps`` and every ``figure_every_n_steps`` the figure ``adv/mass_by_k``: the mean
    mass per ``K`` observed since the start against the estimator's exact value.

    Args:
        weight_by_length: Weigh each completion's mass by its length in the sign shares.
        histogram_every_n_steps: Histogram cadence (0: never).
        figure_every_n_steps: Figure cadence (0: never).
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "adv/mass_mean", "adv/mass_k<K>", "adv/pos_share", "adv/neg_share", "adv/nonzero_steps", "adv/steps",
        "adv/abs_mean",
    )

    def __init__(
        self,
        weight_by_length: bool = False,
        histogram_every_n_steps: int = 10,
        figure_every_n_steps: int = 100,
    ) -> None:
        require_at_least(
            NAME, 0, " (0: never)", histogram_every_n_steps=histogram_every_n_steps,
            figure_every_n_steps=figure_every_n_steps,
        )  # fmt: skip
        self.weight_by_length = weight_by_length
        self.histogram_every_n_steps, self.figure_every_n_steps = (
            histogram_every_n_steps,
            figure_every_n_steps,
        )
        self.mass_sum: torch.Tensor | None = None  # [G + 1] summed mass per K, all steps
        self.mass_count: torch.Tensor | None = None  # [G + 1]
        self.steps = 0  # steps measured
        self.nonzero_steps = 0  # of which with a non-zero advantage
        self._warned = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        require_run(
            NAME, trainer, pl_module, "estimator", "group_size",
            writer=self.histogram_every_n_steps > 0 or self.figure_every_n_steps > 0,
            figure_option="histogram_every_n_steps: 0 and figure_every_n_steps: 0",
        )  # fmt: skip
        if reward_is_binary(getattr(pl_module, "reward", None)) is False:
            self._warn()

    def _warn(self) -> None:
        if not self._warned:
            rank_zero_warn(
                "AdvantageStats: the rewards are not binary, so adv/mass_k<K> and the adv/mass_by_k "
                "figure are skipped; the other metrics are written"
            )
            self._warned = True

    def on_rollout_stats(self, trainer: Trainer, pl_module: LightningModule, stats: RolloutStats) -> None:
        G = stats.group_size
        lengths = stats.lengths.reshape(stats.advantages.shape).double()  # [P, G]
        local = torch.cat([stats.rewards.double(), stats.advantages.double(), lengths], dim=1)
        rewards, adv, lengths = gather(pl_module, local).split(G, dim=1)  # [P_all, G] each
        mass = advantage_mass(adv)  # [P_all]
        pos, neg = positive_negative_shares(adv, lengths if self.weight_by_length else None)  # NaN: all zero
        self.steps += 1
        self.nonzero_steps += int(bool((adv != 0).any()))
        metrics = {
            "adv/steps": float(self.steps),
            "adv/nonzero_steps": float(self.nonzero_steps),
            "adv/mass_mean": mass.mean().item(),
            "adv/pos_share": pos,
            "adv/neg_share": neg,
            "adv/abs_mean": adv.abs().mean().item(),
        }
        metrics.update(self.mass_by_k(rewards, mass))
        step = log_step(trainer, metrics)
        writer = tensorboard(trainer)
        if writer is not None and every(step, self.histogram_every_n_steps):
            writer.add_histogram("adv/advantages", adv.flatten().float(), global_step=step)
        if writer is not None and every(step, self.figure_every_n_steps):
            self.draw(writer, pl_module, G, step)

    def mass_by_k(self, rewards: torch.Tensor, mass: torch.Tensor) -> dict[str, float]:
        """``{adv/mass_k<K>: mean mass}`` of the fully scorable groups; accumulates for the figure."""
        if non_binary(rewards, 1e-6).numel():
            self._warn()
            return {}
        G = rewards.shape[1]
        keep = ~rewards.isnan().any(-1)  # [P]
        k = rewards[keep].round().long().sum(-1)  # [P']
        sums = torch.zeros(G + 1, dtype=torch.float64).index_add_(0, k, mass[keep])
        counts = torch.bincount(k, minlength=G + 1).double()
        if self.mass_sum is None or self.mass_sum.numel() != G + 1:
            self.mass_sum = torch.zeros(G + 1, dtype=torch.float64)
            self.mass_count = torch.zeros(G + 1, dtype=torch.float64)
        self.mass_sum += sums
        self.mass_count += counts
        return {f"adv/mass_k{j}": (sums[j] / counts[j]).item() for j in range(G + 1) if counts[j] > 0}

    def draw(self, writer, pl_module: LightningModule, G: int, step: int) -> None:
        if self.mass_sum is None or not bool((self.mass_count > 0).any()):
            return
        observed = (self.mass_sum / self.mass_count.clamp(min=1)).tolist()
        series = {"observed (mean)": observed}
        try:
            exact = advantage_mass_by_k(pl_module.estimator, G).tolist()
            series[f"{type(pl_module.estimator).__name__} (exact)"] = exact
        except ValueError:
            pass  # the estimator is not defined at this group size alone
        labels = [str(j) for j in range(G + 1)]
        title = f"advantage mass by K, G = {G}"
        fig = bar_figure(
            labels, series, xlabel="K correct of G", ylabel="advantage mass sum|A|/2", title=title
        )
        add_figure(writer, "adv/mass_by_k", fig, step)

    def state_dict(self) -> dict:
        state = {"steps": self.steps, "nonzero_steps": self.nonzero_steps}
        if self.mass_sum is None:
            return state
        return {**state, "mass_sum": self.mass_sum.tolist(), "mass_count": self.mass_count.tolist()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.steps = int(state_dict.get("steps", 0))
        self.nonzero_steps = int(state_dict.get("nonzero_steps", 0))
        if "mass_sum" in state_dict:
            self.mass_sum = torch.tensor(state_dict["mass_sum"], dtype=torch.float64)
            self.mass_count = torch.tensor(state_dict["mass_count"], dtype=torch.float64)
