"""The scalars a GRPO step logs, as ratios of sums so that several ranks reduce to the global values.

Each metric is a pair ``(numerator, denominator)`` summed over ranks by
:func:`lit_grpo.parallel.reduce_ratios`: per-completion means become means over the global batch,
counters become totals, and values that are already global (the loss, whose divisors were all-reduced,
the gradient norm) stay as they are.
"""

from __future__ import annotations

import math

from lit_grpo.perf import PhaseTimer
from lit_grpo.types import RolloutStats

Pairs = dict[str, tuple[float, float]]


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
    }
    for name, values in stats.reward_terms.items():
        kept = values[~values.isnan()].double()
        pairs[f"reward/{name}"] = (kept.sum().item(), float(kept.numel()))
    pairs.update({f"reward/{name}": (float(v), total) for name, v in stats.reward_counters.items()})
    return pairs


def train_pairs(losses: dict[str, float], tokens: float, with_kl: bool) -> Pairs:
    """``train/*`` pairs: token-weighted clip fraction and entropy, rank-averaged loss, KL and grad norm."""
    pairs: Pairs = {}
    for name, value in losses.items():
        if (name == "kl" and not with_kl) or name.startswith("mismatch/"):
            continue
        weighted = name in ("clip_frac", "entropy")
        pairs[f"train/{name}"] = (value * tokens, tokens) if weighted else (value, 1.0)
    return pairs


def mismatch_pairs(losses: dict[str, float], tokens: float) -> Pairs:
    """``rollout/logp_diff_mean`` and ``rollout/logp_kl_k3``, token-weighted over ranks. The maximum is
    not a ratio of sums: the caller reduces ``losses["mismatch/logp_diff_max"]`` with a max."""
    return {
        f"rollout/{name}": (losses[f"mismatch/{name}"] * tokens, tokens)
        for name in ("logp_diff_mean", "logp_kl_k3")
        if f"mismatch/{name}" in losses
    }


def perf_pairs(timer: PhaseTimer, tokens: float, world_size: int) -> Pairs:
    """``perf/*``: phase times averaged over ranks, throughput summed over ranks."""
    step_s = timer.total()
    pairs: Pairs = {f"perf/{k}": (v, 1.0) for k, v in timer.seconds.items()}
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
