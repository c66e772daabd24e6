"""The scalars a GRPO step logs, as ratios of sums so that several ranks reduce to the global values.

Each metric is a pair ``(numerator, denominator)`` summed over ranks by
:func:`lit_grpo.parallel.reduce_ratios`: per-completion means become means over the global batch,
counters become totals, and values that are already global (the loss, whose divisors were all-reduced,
the gradient norm) stay as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.envs.rollout import episode_metrics, turn_credit
from lit_grpo.losses import LossInputs, LossOutput
from lit_grpo.parallel import extremes_over_ranks, reduce_ratios
from lit_grpo.perf import PhaseTimer
from lit_grpo.types import RolloutStats

Pairs = dict[str, tuple[float, float]]
Metrics = dict[str, float]

#: The scalars GRPOModule logs (docs/getting-started.md); ``lit-grpo compare`` checks the names an experiment
# reads.
GRPO_METRICS: tuple[str, ...] = (
    "train/loss", "train/grad_norm", "train/entropy", "train/lr", "train/nonfinite_steps", "train/<name>",
    "rollout/reward_mean", "rollout/reward_std", "rollout/len_mean", "rollout/truncated_frac",
    "rollout/unscorable_frac", "rollout/prompts_drawn", "rollout/completions_generated",
    "rollout/tokens_generated", "rollout/sampled_nll", "rollout/logp_diff_mean", "rollout/logp_diff_max",
    "rollout/logp_kl_k3",
    "rollout/retired_prompts", "rollout/skipped_prompts", "reward/<term>", "data/skipped_rows",
    "perf/<phase>_s", "perf/tokens_per_s", "perf/elided_frac", "optim/<name>",
    "env/turns_mean", "env/tool_calls_mean", "env/truncated_frac", "env/unanswered_frac", "env/seconds",
    "env/tool_errors", "env/tool_timeouts", "env/observations_cut", "env/context_exhausted_frac",
    "env/adv_share_turn<k>", "env/adv_share_final_turn",
    "async/<name>",
)


@dataclass
class StepStats:
    """What one optimizer step measured on this rank: its loss, gradient norm and loss statistics."""

    loss: float = 0.0  # sum of (loss * weights) over the micro-batches: global, as the weights' divisors are
    grad_norm: float = 0.0
    means: Pairs = field(default_factory=dict)  # name -> (sum, count) over this rank's tokens or completions
    terms: dict[str, float] = field(default_factory=dict)  # name -> sum of (term * weights), like the loss
    mins: dict[str, float] = field(default_factory=dict)  # name -> smallest value on this rank
    maxs: dict[str, float] = field(default_factory=dict)  # name -> largest value on this rank

    def add(self, loss: Tensor, out: LossOutput, batch: LossInputs) -> None:
        """Fold in one micro-batch: its weighted loss and the loss's statistics."""
        maskf = batch.mask.float()  # [n, T]
        self.loss += loss.item()
        for name, value in out.means.items():  # [n, T]: over tokens; [n]: over completions
            require(value.shape in (batch.mask.shape, batch.mask.shape[:1]),
                    f"the loss statistic {name!r} has shape {tuple(value.shape)}; a mean is [n, T] (over "
                    f"tokens, here {tuple(batch.mask.shape)}) or [n] (over completions)")
            if value.dim() == 1:
                num, den = value.sum(), value.numel()
            else:
                num, den = (value * maskf).sum(), maskf.sum()
            old = self.means.get(name, (0.0, 0.0))
            self.means[name] = (old[0] + float(num), old[1] + float(den))
        for name, value in out.terms.items():
            self.terms[name] = self.terms.get(name, 0.0) + (value * batch.weights).sum().item()

    def add_extremes(self, mins: dict[str, float], maxs: dict[str, float]) -> None:
        for name, value in mins.items():
            self.mins[name] = min(self.mins.get(name, math.inf), value)
        for name, value in maxs.items():
            self.maxs[name] = max(self.maxs.get(name, -math.inf), value)


@dataclass
class UpdateStats:
    """What the update on one rollout batch measured on this rank: each optimizer step's statistics, the
    entropy of its first pass over the batch, and the engine/trainer mismatch before it."""

    steps: list[StepStats] = field(default_factory=list)  # one per optimizer step, in order
    entropy: tuple[float, float] | None = None  # (sum, tokens), None when nothing was trained on
    mismatch: dict[str, float] = field(default_factory=dict)  # logp_diff_mean, logp_diff_max, logp_kl_k3
    elided: tuple[float, float] = (0.0, 0.0)  # (completions left out of every forward and backward, all)

    @property
    def loss(self) -> float:
        """The loss of the last optimizer step."""
        return self.steps[-1].loss if self.steps else 0.0

    @property
    def grad_norm(self) -> float:
        """The gradient norm of the last optimizer step."""
        return self.steps[-1].grad_norm if self.steps else 0.0

    def add_entropy(self, entropy: Tensor, mask: Tensor) -> None:
        """Fold in one micro-batch's token entropies ``[n, T]`` over its generated tokens ``mask``."""
        maskf = mask.float()
        old = self.entropy or (0.0, 0.0)
        self.entropy = (old[0] + (entropy.detach() * maskf).sum().item(), old[1] + maskf.sum().item())


def rollout_pairs(stats: RolloutStats, world_size: int) -> Pairs:
    """``rollout/*``, ``reward/*`` pairs of one rank's step (the reward std is finished by :func:`finish`)."""
    total = 1.0 / world_size  # a count summed over ranks
    scorable = stats.rewards[~stats.rewards.isnan()].double()
    n, k = float(stats.rewards.numel()), float(scorable.numel())
    lengths = stats.lengths.double()
    pairs: Pairs = {
        "rollout/reward_mean": (scorable.sum().item(), k),
        "rollout/_reward_sq": (scorable.square().sum().item(), k),
        "rollout/_reward_n": (k, total),
        "rollout/len_mean": (lengths.sum().item(), float(lengths.numel())),
        "rollout/truncated_frac": (stats.truncated.double().sum().item(), float(stats.truncated.numel())),
        "rollout/unscorable_frac": (n - k, n),
        "rollout/prompts_drawn": (float(stats.num_drawn), total),
        "rollout/_completions_drawn": (float(stats.num_drawn * stats.group_size), total),  # summed over ranks
        "rollout/_tokens_drawn": (float(stats.tokens_drawn), total),
    }
    if stats.rollouts is not None:  # minus each sampled token's log-prob: a sampled estimate of the entropy
        sampled = stats.rollouts.sampled_mask
        nll = -(stats.rollouts.logprobs.double() * sampled).sum().item()
        pairs["rollout/sampled_nll"] = (nll, float(sampled.sum()))
    for name, values in stats.reward_terms.items():
        kept = values[~values.isnan()].double()
        pairs[f"reward/{name}"] = (kept.sum().item(), float(kept.numel()))
    pairs.update({f"reward/{name}": (float(v), total) for name, v in stats.reward_counters.items()})
    return pairs


def episode_pairs(episodes: list, world_size: int, advantages: Tensor | None = None) -> Pairs:
    """``env/*`` pairs of one rank's episodes (:func:`lit_grpo.envs.episode_metrics`): means and fractions
    over the episodes of all ranks; seconds, tool errors and timeouts summed over ranks; with ``advantages``
    (one per episode) the share of the advantage on each turn (:func:`lit_grpo.envs.rollout.turn_credit`)."""
    k = float(len(episodes))
    pairs = {name: (value * k, k) if name.endswith(("_mean", "_frac")) else (value, 1.0 / world_size)
             for name, value in episode_metrics(episodes).items()}
    if advantages is not None:
        pairs.update(turn_credit(episodes, advantages))
    return pairs


def train_pairs(update: UpdateStats) -> Pairs:
    """``train/*`` pairs of a rollout batch: the loss and gradient norm of its last optimizer step (global
    already, averaged over ranks), the loss's means pooled over all its optimizer steps and tokens (or
    completions) of the global batch, its terms (KL) averaged over the steps, and the entropy of the first
    pass."""
    pairs: Pairs = {"train/loss": (update.loss, 1.0), "train/grad_norm": (update.grad_norm, 1.0)}
    for step in update.steps:
        for name, (num, den) in step.means.items():
            old = pairs.get(f"train/{name}", (0.0, 0.0))
            pairs[f"train/{name}"] = (old[0] + num, old[1] + den)
        for name, value in step.terms.items():
            old = pairs.get(f"train/{name}", (0.0, 0.0))
            pairs[f"train/{name}"] = (old[0] + value / len(update.steps), 1.0)
    if update.entropy is not None:
        pairs["train/entropy"] = update.entropy
    return pairs


def step_pairs(update: UpdateStats) -> list[Pairs]:
    """One set of ``optim/*`` pairs per optimizer step of the rollout batch: its loss, gradient norm, the
    loss's means and terms (the per-step view of :func:`train_pairs`)."""
    rows = []
    for step in update.steps:
        row: Pairs = {"optim/loss": (step.loss, 1.0), "optim/grad_norm": (step.grad_norm, 1.0)}
        row.update({f"optim/{name}": value for name, value in step.means.items()})
        row.update({f"optim/{name}": (value, 1.0) for name, value in step.terms.items()})
        rows.append(row)
    return rows


def extremes(update: UpdateStats, per_step: bool) -> tuple[dict[str, float], dict[str, float]]:
    """``(minima, maxima)`` of this rank over the rollout batch's optimizer steps, as ``train/<name>``; and,
    with ``per_step``, per step as ``optim/<name>@<k>``. The caller reduces them over ranks with a min and a
    max."""
    mins: dict[str, float] = {}
    maxs: dict[str, float] = {}
    for k, step in enumerate(update.steps):
        for name, value in step.mins.items():
            mins[f"train/{name}"] = min(mins.get(f"train/{name}", math.inf), value)
            if per_step:
                mins[f"optim/{name}@{k}"] = value
        for name, value in step.maxs.items():
            maxs[f"train/{name}"] = max(maxs.get(f"train/{name}", -math.inf), value)
            if per_step:
                maxs[f"optim/{name}@{k}"] = value
    return mins, maxs


def mismatch_pairs(update: UpdateStats, tokens: float) -> Pairs:
    """``rollout/logp_diff_mean`` and ``rollout/logp_kl_k3``, token-weighted over ranks. The maximum is
    not a ratio of sums: the caller reduces ``update.mismatch["logp_diff_max"]`` with a max."""
    return {
        f"rollout/{name}": (update.mismatch[name] * tokens, tokens)
        for name in ("logp_diff_mean", "logp_kl_k3")
        if name in update.mismatch
    }


def perf_pairs(timer: PhaseTimer, tokens: float, world_size: int,
               elided: tuple[float, float] = (0.0, 0.0)) -> Pairs:
    """``perf/*``: phase times averaged over ranks, throughput summed over ranks, and the share of completions
    the update left out (``elided``: their count and the completions', pooled over ranks)."""
    step_s = timer.total()
    pairs: Pairs = {f"perf/{k}": (v, 1.0) for k, v in timer.seconds.items()}
    pairs["perf/elided_frac"] = elided
    pairs["perf/step_s"] = (step_s, 1.0)
    pairs["perf/tokens_per_s"] = (tokens / max(step_s, 1e-9), 1.0 / world_size)
    return pairs


def finish(values: dict[str, float]) -> dict[str, float]:
    """The reward standard deviation (unbiased) from the reduced sums; drops the helper entries."""
    n = values.pop("rollout/_reward_n")
    mean_sq = values.pop("rollout/_reward_sq")
    mean = values["rollout/reward_mean"]
    var = (mean_sq - mean * mean) * n / (n - 1) if n > 1 else 0.0
    values["rollout/reward_std"] = math.sqrt(max(var, 0.0))
    return values


def step_values(stats: RolloutStats, update: UpdateStats, timer: PhaseTimer, extra: Pairs, strategy: Any,
                world_size: int, generated: dict[str, float]) -> tuple[dict[str, float], list[Metrics]]:
    """One training step's metrics, reduced over ranks to the global batch's values (one all-reduce of the
    ratios, one of the extremes), and, when the rollout batch took several optimizer steps, one row of
    ``optim/<name>`` per step. ``extra``: further pairs (the engine's, the curriculum's); ``generated``: the
    completions and tokens generated since the run started, brought up to date in place."""
    tokens = float(stats.lengths.sum())
    pairs = {**rollout_pairs(stats, world_size), **train_pairs(update), **mismatch_pairs(update, tokens),
             **perf_pairs(timer, tokens, world_size, update.elided), **extra}
    if stats.rollouts is not None and stats.rollouts.episodes is not None:
        pairs.update(episode_pairs(stats.rollouts.episodes, world_size, stats.advantages))
    rows = step_pairs(update) if len(update.steps) > 1 else []
    pairs.update({f"{name}@{k}": value for k, row in enumerate(rows) for name, value in row.items()})
    metrics = finish(reduce_ratios(pairs, strategy, world_size))
    for name in ("completions", "tokens"):  # this step's global counts -> totals since the start
        generated[name] += metrics.pop(f"rollout/_{name}_drawn")
        metrics[f"rollout/{name}_generated"] = generated[name]
    mins, maxs = extremes(update, per_step=bool(rows))
    if "logp_diff_max" in update.mismatch:
        maxs["rollout/logp_diff_max"] = update.mismatch["logp_diff_max"]
    mins, maxs = extremes_over_ranks(mins, maxs, strategy, world_size)
    metrics.update({**mins, **maxs})
    return metrics, _optimizer_rows(metrics, len(rows))


def _optimizer_rows(metrics: dict[str, float], steps: int) -> list[dict[str, float]]:
    """The ``optim/<name>@<k>`` entries of ``metrics``, moved out into one row per optimizer step ``k``."""
    rows: list[dict[str, float]] = [{} for _ in range(steps)]
    for key in [k for k in metrics if k.startswith("optim/")]:
        name, _, k = key.rpartition("@")
        rows[int(k)][name] = metrics.pop(key)
    return rows
