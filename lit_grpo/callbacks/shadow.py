"""ShadowEstimators: how every configured estimator would have treated the run's own rollouts."""

from __future__ import annotations

from typing import ClassVar

import torch
from lightning import Callback, LightningModule, Trainer

from lit_grpo.callbacks._logging import add_figure, log_scalars, tensorboard
from lit_grpo.callbacks._probe import GradientProbe
from lit_grpo.callbacks._requirements import require_run, require_whole_gradients
from lit_grpo.callbacks._rollouts import fork_rng, rollout_stats
from lit_grpo.callbacks._schedule import every, log_this_step, logging_step
from lit_grpo.checks import require, require_at_least
from lit_grpo.diagnostics.budget import BIN_LABELS, NUM_BINS
from lit_grpo.diagnostics.gradients import LinearTarget, gradient_row_blocks, row_dim, take_rows
from lit_grpo.diagnostics.plots import shadow_figure
from lit_grpo.diagnostics.shadow import (
    budget_by_bin,
    cosine_matrix,
    sequence_weights,
    starved_groups,
    unique_labels,
)
from lit_grpo.estimators import AdvantageEstimator
from lit_grpo.estimators.functional import sum_over_ranks
from lit_grpo.types import RolloutStats

NAME = "ShadowEstimators"
#: Label of the run's own advantages in the metrics and the figure.
TRAIN = "train"


class ShadowEstimators(Callback):
    """Every configured estimator applied to the run's own rewards, without changing training.

    At each logged step the estimators in ``estimators`` turn the step's rewards ``[P, G]`` into advantages
    (the run's own estimator keeps training); each, and the run's own advantages under ``train``, gets the
    share of groups it starves and its budget ``sum_i |A_i| T_i`` per success-rate bin. Every
    ``gradient_every_n_steps`` steps it also builds the per-completion rows ``w_i grad sum_t log pi(y_i,t)``
    once (as ``GradientRank``; ``w_i`` is the loss aggregation's weight) and, with one product
    ``A [E, N] @ rows``, every estimator's policy-gradient direction, compared by cosine and norm with the
    run's own (measured after the step's update) and with each other, in the figure ``shadow/estimators``.
    Under data parallelism counts and directions are summed over the ranks (batch-coupled estimators sum
    their statistics as in training): the numbers are those of the global batch. The scalars are listed
    in ``metrics`` and explained in docs/diagnostics.md.

    Args:
        estimators: The estimators to shadow, by class path (e.g. ``lit_grpo.Sign``).
        names: Metric names of the estimators, one each (null: class names).
        gradient_every_n_steps: Measure the directions at steps ``0, n, 2n, ...`` (0: never; then no
            gradient is computed).
        probe: The parameters, projection and micro-batches of the rows (``GradientProbe``); rows are
            consumed a micro-batch at a time, so memory is one micro-batch of rows plus ``E x D``.
        figure: Draw the figure at every direction measurement.
    """

    metrics: ClassVar[tuple[str, ...]] = (
        "shadow/<estimator>/starved_frac", "shadow/<estimator>/budget_<bin>", "shadow/<estimator>/cos_train",
        "shadow/<estimator>/norm_ratio", "shadow/<estimator>/cos_<other>", "shadow/rows", "shadow/zero_train",
    )

    def __init__(
        self,
        estimators: list[AdvantageEstimator],
        names: list[str] | None = None,
        gradient_every_n_steps: int = 10,
        probe: GradientProbe = GradientProbe(),  # noqa: B008 (a dataclass: LightningCLI nests its options)
        figure: bool = True,
    ) -> None:
        estimators = list(estimators or [])
        require(bool(estimators),
                f"{NAME}: estimators is empty; list the estimators to shadow, e.g. "
                "[{class_path: lit_grpo.Sign}, {class_path: lit_grpo.MaxRL}]")
        bad = [e for e in estimators if not isinstance(e, AdvantageEstimator)]
        if bad:
            raise TypeError(
                f"{NAME}: estimators must be AdvantageEstimator instances, got {bad[0]!r}; give them by "
                "class_path, e.g. {class_path: lit_grpo.MaxRL}"
            )
        require(
            names is None or len(names) == len(estimators),
            f"{NAME}: names has {len(names or [])} entries for {len(estimators)} estimators; give one each",
        )
        labels = list(names) if names is not None else unique_labels(estimators)
        require(
            len(set(labels)) == len(labels)
            and TRAIN not in labels
            and all(x and "/" not in x for x in labels),
            f"{NAME}: names {labels} must be distinct, non-empty, without '/', and not {TRAIN!r}; "
            "set names to such a list",
        )
        require_at_least(NAME, 0, " (0: never)", gradient_every_n_steps=gradient_every_n_steps)
        self.estimators, self.labels = estimators, labels
        self.gradient_every_n_steps = gradient_every_n_steps
        self.probe, self.figure = probe, figure
        self.targets: list[LinearTarget] = []
        self.zero_train = 0

    # ---- setup -------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        draws = self.figure and self.gradient_every_n_steps > 0
        require_run(
            NAME,
            trainer,
            pl_module,
            "policy",
            "sampling",
            "group_size",
            writer=draws,
            figure_option="figure: false",
        )
        for estimator, label in zip(self.estimators, self.labels, strict=True):
            require(estimator.min_group_size <= pl_module.group_size,
                    f"{NAME}: {label} needs groups of at least {estimator.min_group_size}, but the run's "
                    f"group_size is {pl_module.group_size}; drop it from estimators or raise group_size")
        if self.gradient_every_n_steps:
            fix = "set gradient_every_n_steps: 0, or measure under FSDP2, DDP or one process"
            require_whole_gradients(NAME, trainer, fix)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.gradient_every_n_steps:
            return
        self.targets = self.probe.targets(NAME, pl_module.policy)

    # ---- measuring ---------------------------------------------------------------------------------
    def advantages(self, rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``[E, P, G]`` advantages of every estimator for ``rewards`` and the completions' ``lengths``
        ``[P, G]``, called in order (collectives included)."""
        out = []
        for estimator, label in zip(self.estimators, self.labels, strict=True):
            try:
                out.append(estimator(rewards, lengths=lengths).float().cpu())
            except (ValueError, TypeError) as err:
                raise ValueError(
                    f"{NAME}: the shadow estimator {label} failed on the step's rewards: {err}"
                ) from err
        return torch.stack(out)

    def directions(
        self, pl_module: LightningModule, stats: RolloutStats, adv: torch.Tensor
    ) -> tuple[torch.Tensor, int]:
        """``(d [E + 1, D] float64, rows)``: the local directions ``A @ rows`` and the rows computed."""
        dim = row_dim(self.targets, self.probe.projection_dim)
        total = torch.zeros(adv.shape[0], dim, dtype=torch.float64)  # [E + 1, D]
        flat = adv.reshape(adv.shape[0], -1)  # [E + 1, N]
        needed = (flat != 0).any(0).nonzero().flatten()  # completions some estimator weights
        if needed.numel() == 0 or stats.rollouts is None:
            return total, 0
        rollouts = take_rows(stats.rollouts, needed)
        weights = sequence_weights(stats.lengths[needed], getattr(pl_module, "aggregation", None))  # [n]
        coef = flat[:, needed].double()  # [E + 1, n]
        with fork_rng(pl_module):
            blocks = gradient_row_blocks(
                pl_module.policy, rollouts, weights, self.targets, pl_module.sampling.temperature,
                self.probe.projection_dim, self.probe.seed, self.probe.micro_batch_size,
            )  # fmt: skip
            for start, rows in blocks:
                total += coef[:, start : start + rows.shape[0]] @ rows.double().cpu()  # [E + 1, D]
        return total, int(needed.numel())

    def measure(
        self, pl_module: LightningModule, stats: RolloutStats, directions: bool
    ) -> tuple[dict[str, float], torch.Tensor | None, list[float]]:
        """The step's metrics, the cosine matrix ``[E + 1, E + 1]`` (with ``directions``; else None) and the
        starved shares ``[E + 1]`` (the run first), all of the global batch. Every rank must call it at the
        same step: the estimators and the sums over ranks are collectives."""
        rewards = stats.rewards  # [P, G]
        shadows = self.advantages(rewards, stats.lengths.view(rewards.shape))  # [E, P, G]
        adv = torch.cat([stats.advantages.float().cpu()[None], shadows])  # [E + 1, P, G]
        pass_rate = rewards.double().nanmean(-1)  # [P], NaN for an all-unscorable group
        local = torch.cat([
            torch.tensor([float(rewards.shape[0])], dtype=torch.float64),
            torch.stack([starved_groups(a).sum() for a in adv]).double(),  # [E + 1]
            torch.stack([budget_by_bin(a, stats.lengths, pass_rate) for a in adv]).flatten(),  # [(E + 1) * 5]
        ])  # fmt: skip
        totals = sum_over_ranks(local)
        groups, starved = totals[0].item(), totals[1 : adv.shape[0] + 1]
        budget = totals[adv.shape[0] + 1 :].view(adv.shape[0], NUM_BINS)  # [E + 1, 5]
        labels = [TRAIN, *self.labels]
        shares = (starved / groups).tolist() if groups > 0 else [float("nan")] * len(labels)
        metrics: dict[str, float] = {}
        for j, label in enumerate(labels):
            metrics[f"shadow/{label}/starved_frac"] = shares[j]
            if budget[j].sum() > 0:
                for b, share in zip(BIN_LABELS, (budget[j] / budget[j].sum()).tolist(), strict=True):
                    metrics[f"shadow/{label}/budget_{b}"] = share
        if not directions:
            return metrics, None, shares
        local_d, rows = self.directions(pl_module, stats, adv)
        d = sum_over_ranks(local_d.flatten()).view(local_d.shape)  # [E + 1, D], the global batch's
        rows = int(sum_over_ranks(torch.tensor([float(rows)], dtype=torch.float64))[0].item())
        cos = cosine_matrix(d)  # [E + 1, E + 1]
        norms = torch.linalg.vector_norm(d, dim=1)  # [E + 1]
        if norms[0] == 0:
            self.zero_train += 1
        for i, label in enumerate(self.labels, start=1):
            metrics[f"shadow/{label}/cos_train"] = cos[i, 0].item()
            metrics[f"shadow/{label}/norm_ratio"] = (
                (norms[i] / norms[0]).item() if norms[0] > 0 else float("nan")
            )
            for j in range(i + 1, len(labels)):
                metrics[f"shadow/{label}/cos_{labels[j]}"] = cos[i, j].item()
        metrics["shadow/rows"] = float(rows)
        metrics["shadow/zero_train"] = float(self.zero_train)
        return metrics, cos, shares

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        stats = rollout_stats(outputs)
        if stats is None:
            return
        step = logging_step(trainer)
        directions = bool(self.gradient_every_n_steps) and every(step, self.gradient_every_n_steps)
        if not (directions or log_this_step(trainer, step)):
            return
        metrics, cos, starved = self.measure(pl_module, stats, directions)
        log_scalars(trainer, metrics, step)
        if cos is not None and self.figure:
            self.draw(trainer, [TRAIN, *self.labels], cos, starved, step)

    def draw(
        self, trainer: Trainer, labels: list[str], cos: torch.Tensor, starved: list[float], step: int
    ) -> None:
        writer = tensorboard(trainer)
        if writer is None:
            return
        fig = shadow_figure(labels, cos.tolist(), starved, title=f"shadow estimators, step {step}")
        add_figure(writer, "shadow/estimators", fig, step)

    def state_dict(self) -> dict:
        return {"zero_train": self.zero_train}

    def load_state_dict(self, state_dict: dict) -> None:
        self.zero_train = int(state_dict.get("zero_train", 0))
