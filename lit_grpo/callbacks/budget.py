"""GradientBudget: where the step's gradient budget goes, by prompt difficulty."""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from lightning import LightningModule, Trainer

from lit_grpo.callbacks._logging import add_figure, log_step, tensorboard
from lit_grpo.callbacks._probe import GradientProbe
from lit_grpo.callbacks._requirements import check_binary_rewards, require_run
from lit_grpo.callbacks._rollouts import RolloutStatsCallback, fork_rng, fresh_rewards, gather
from lit_grpo.callbacks._schedule import every
from lit_grpo.checks import require, require_at_least
from lit_grpo.diagnostics.budget import BIN_LABELS, NUM_BINS, advantage_budget, bin_index, budget_shares
from lit_grpo.diagnostics.degeneracy import EMASuccessTracker
from lit_grpo.diagnostics.gradients import LinearTarget, group_gradient_norms
from lit_grpo.diagnostics.plots import bar_figure
from lit_grpo.types import RolloutStats

NAME = "GradientBudget"


class GradientBudget(RolloutStatsCallback):
    """Share of each step's gradient budget per difficulty bin (METHODS.md section 3).

    Two budgets of a prompt, under different names: the proxy ``sum_i |A_i| * T_i`` (free; with binary
    rewards its split between bins follows from the estimator's formulas alone, not from the run) and,
    with ``exact``, the norm of the prompt's gradient contribution
    ``|| sum_i A_i grad sum_t log pi(y_i,t) ||`` over the chosen parameters (per-completion gradients as in
    ``GradientRank``, after the step's update; ``.grad``, the parameters and the RNG are left as they were).
    Prompts are binned by a pass-rate estimate independent of this step's rewards: the moving average of
    earlier visits (``estimate="ema"``, free; first visits are left out, counted in ``budget/unbinned_frac``)
    or ``num_samples`` fresh completions per prompt after the step (``estimate="resample"``).

    Needs binary rewards. Writes the scalars in ``metrics`` every step (shares per bin
    ``0.0-0.2`` .. ``0.9-1.0``; docs/diagnostics.md explains each) and every ``figure_every_n_steps``
    the bar figure ``budget/shares`` of the shares accumulated since the start of training.

    Args:
        estimate: Where the independent pass rate comes from.
        ema_decay: Weight of the previous estimate in the moving average (``estimate="ema"``).
        num_samples: Completions per prompt for ``estimate="resample"``.
        figure_every_n_steps: Draw the figure every this many steps (0: never).
        exact: Also measure the exact budget (norms of the prompts' gradient contributions).
        probe: The parameters and micro-batches of the exact budget (``GradientProbe``; its norms take whole
            rows, so no ``projection_dim``).
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "budget/share_<bin>", "budget/prompt_share_<bin>", "budget/unbinned_frac", "budget/exact_share_<bin>",
    )

    def __init__(
        self,
        estimate: Literal["ema", "resample"] = "ema",
        ema_decay: float = 0.5,
        num_samples: int = 8,
        figure_every_n_steps: int = 100,
        exact: bool = False,
        probe: GradientProbe = GradientProbe(),  # noqa: B008 (a dataclass: LightningCLI nests its options)
    ) -> None:
        require(
            estimate in ("ema", "resample"),
            f"GradientBudget: estimate={estimate!r} must be 'ema' or 'resample'",
        )
        require(num_samples >= 1, f"GradientBudget: num_samples={num_samples} must be >= 1")
        require_at_least(NAME, 0, " (0: never)", figure_every_n_steps=figure_every_n_steps)
        require(
            exact or probe == GradientProbe(),
            f"GradientBudget: probe={probe} sets how the exact budget is measured; set "
            "exact: true or drop probe",
        )
        require(
            probe.projection_dim is None,
            f"GradientBudget: the exact budget takes whole rows; leave probe.projection_dim null (got "
            f"{probe.projection_dim})",
        )
        self.estimate, self.num_samples = estimate, num_samples
        self.figure_every_n_steps = figure_every_n_steps
        self.exact, self.probe = exact, probe
        self.targets: list[LinearTarget] = []
        self.tracker = EMASuccessTracker(ema_decay)
        # [prompts, proxy budget, exact budget] per bin, all steps
        self.totals = torch.zeros(3, NUM_BINS, dtype=torch.float64)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        require_run(
            NAME, trainer, pl_module, "engine", "score", "sampling", *(["policy"] if self.exact else []),
            writer=self.figure_every_n_steps > 0, figure_option="figure_every_n_steps: 0", binary=True,
        )  # fmt: skip

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.exact:
            return
        self.targets = self.probe.targets(NAME, pl_module.policy)

    def exact_budget(self, pl_module: LightningModule, stats: RolloutStats) -> torch.Tensor:
        """``[P]`` norms of the prompts' gradient contributions (NaN without the step's token ids)."""
        if stats.rollouts is None:
            return torch.full((stats.rewards.shape[0],), float("nan"), dtype=torch.float64)
        with fork_rng(pl_module):
            return group_gradient_norms(
                pl_module.policy, stats.rollouts, stats.advantages.reshape(-1).float(), stats.group_size,
                self.targets, pl_module.sampling.temperature, self.probe.micro_batch_size,
            )  # fmt: skip

    def pass_rates(self, pl_module: LightningModule, stats: RolloutStats) -> torch.Tensor:
        """``[P]`` independent pass-rate estimates (NaN where there is none); updates the moving average."""
        if self.estimate == "resample":
            return fresh_rewards(NAME, pl_module, stats.batch, self.num_samples, 1e-6).double().nanmean(-1)
        rewards = stats.rewards.double()
        prior = self.tracker.get(stats.batch.ids)  # [P]
        self.tracker.update(stats.batch.ids, rewards.nanmean(-1))
        return prior

    def on_rollout_stats(self, trainer: Trainer, pl_module: LightningModule, stats: RolloutStats) -> None:
        check_binary_rewards(NAME, stats.rewards, 1e-6)
        exact = self.exact_budget(pl_module, stats) if self.exact else torch.zeros(stats.rewards.shape[0])
        local = torch.stack(
            [
                self.pass_rates(pl_module, stats),
                advantage_budget(stats.advantages, stats.lengths),
                exact.double(),
            ],
            dim=1,
        )  # [P, 3]
        rate, budget, exact = gather(pl_module, local).T.contiguous()  # [P_all] each
        index = bin_index(rate)  # [P_all], -1 = no estimate
        binned = index >= 0
        prompts = torch.bincount(index[binned], minlength=NUM_BINS).double()  # [5]
        shares = budget_shares(budget, rate)  # [5]
        self.totals[0] += prompts
        self.totals[1].index_add_(0, index[binned], budget[binned])
        metrics = {"budget/unbinned_frac": 1.0 - binned.double().mean().item()}
        if self.exact and bool(exact.isfinite().all()):
            self.totals[2].index_add_(0, index[binned], exact[binned])
            if bool(binned.any()) and float(exact[binned].sum()) > 0:
                exact_shares = budget_shares(exact, rate).tolist()
                metrics.update(
                    {f"budget/exact_share_{b}": v for b, v in zip(BIN_LABELS, exact_shares, strict=True)}
                )
        if bool(binned.any()):
            metrics.update({f"budget/share_{b}": v for b, v in zip(BIN_LABELS, shares.tolist(), strict=True)})
            n = binned.sum().item()
            metrics.update(
                {f"budget/prompt_share_{b}": v / n for b, v in zip(BIN_LABELS, prompts.tolist(), strict=True)}
            )
        step = log_step(trainer, metrics)
        if every(step, self.figure_every_n_steps):
            self.draw(trainer, step)

    def draw(self, trainer: Trainer, step: int) -> None:
        writer = tensorboard(trainer)
        totals = self.totals if self.exact else self.totals[:2]
        sums = totals.sum(-1, keepdim=True)
        if writer is None or not bool((sums > 0).all()):
            return
        shares = (totals / sums).tolist()
        series = {"prompts": shares[0], "budget (proxy |A| T)": shares[1]}
        if self.exact:
            series["budget (exact gradient norm)"] = shares[2]
        fig = bar_figure(
            BIN_LABELS,
            series,
            xlabel="pass-rate bin",
            ylabel="share",
            title=f"budget by difficulty, steps 0-{step}",
        )
        add_figure(writer, "budget/shares", fig, step)

    def state_dict(self) -> dict:
        return {"tracker": self.tracker.state_dict(), "totals": self.totals.tolist()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.tracker.load_state_dict(state_dict["tracker"])
        totals = torch.tensor(state_dict["totals"], dtype=torch.float64)
        self.totals = torch.cat([totals, torch.zeros(3 - totals.shape[0], NUM_BINS, dtype=torch.float64)])
