"""Gradient budget by prompt difficulty and advantage mass (METHODS.md section 3).

Prompts are binned by an independent pass-rate estimate into ``[0, .2)``, ``[.2, .5)``,
``[.5, .7)``, ``[.7, .9)`` and ``[.9, 1]`` (the last bin closed). A prompt's budget is the cheap
proxy ``sum_i |A_i| * T_i``, or any other non-negative per-prompt amount the caller measures.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lit_grpo.checks import require

#: Edges of the difficulty bins; bin ``b`` is ``[edges[b], edges[b + 1])``, the last one closed.
DIFFICULTY_BINS = (0.0, 0.2, 0.5, 0.7, 0.9, 1.0)
#: Readable names of the bins, e.g. for metric names.
BIN_LABELS = ("0.0-0.2", "0.2-0.5", "0.5-0.7", "0.7-0.9", "0.9-1.0")
NUM_BINS = len(DIFFICULTY_BINS) - 1


def bin_index(pass_rate: Tensor) -> Tensor:
    """``pass_rate [P]`` -> ``[P]`` long bin index in ``0 .. 4``; -1 for NaN or values outside [0, 1]."""
    rate = pass_rate if pass_rate.is_floating_point() else pass_rate.double()
    inner = torch.tensor(DIFFICULTY_BINS[1:-1], dtype=rate.dtype, device=rate.device)  # [4]
    index = torch.bucketize(rate, inner, right=True)  # [P]: edges[b] <= rate < edges[b + 1]
    valid = (rate >= 0) & (rate <= 1)  # False for NaN
    return torch.where(valid, index, torch.full_like(index, -1))


def budget_shares(budget: Tensor, pass_rate: Tensor) -> Tensor:
    """Share of the total budget that falls in each difficulty bin.

    Args:
        budget: ``[P]`` non-negative amount per prompt.
        pass_rate: ``[P]`` pass-rate estimate; prompts with NaN (no estimate) are left out.

    Returns:
        ``[5]`` float64 shares summing to 1, or all zeros when the binned total is 0.
    """
    require(
        budget.shape == pass_rate.shape and budget.dim() == 1,
        f"budget and pass_rate must both have shape [P], got {tuple(budget.shape)} and "
        f"{tuple(pass_rate.shape)}",
    )
    index = bin_index(pass_rate)  # [P]
    keep = index >= 0
    totals = torch.zeros(NUM_BINS, dtype=torch.float64, device=budget.device)  # [5]
    totals.index_add_(0, index[keep], budget[keep].double())
    total = totals.sum()
    return totals / total if total > 0 else totals


def advantage_budget(advantages: Tensor, lengths: Tensor) -> Tensor:
    """``sum_i |A_i| * T_i`` per prompt.

    Args:
        advantages: ``[P, G]``.
        lengths: ``[P, G]`` response tokens, or ``[N]`` group-major (as in ``RolloutStats.lengths``).

    Returns:
        ``[P]`` float64.
    """
    require(lengths.numel() == advantages.numel(),
            f"lengths has {lengths.numel()} entries but advantages {tuple(advantages.shape)} "
            f"has {advantages.numel()}; pass one length per completion")
    lengths = lengths.reshape(advantages.shape).double()  # [P, G]
    return (advantages.double().abs() * lengths).sum(-1)  # [P]


def advantage_mass(advantages: Tensor) -> Tensor:
    """``m = sum_i |A_i| / 2`` per group: ``[P, G]`` -> ``[P]`` float64.

    For a zero-mean group this is the total positive (= total negative) advantage.
    """
    return advantages.double().abs().sum(-1) / 2  # [P]


def positive_negative_shares(advantages: Tensor, weights: Tensor | None = None) -> tuple[float, float]:
    """Shares of the gradient mass carried by positive and by negative advantages.

    Args:
        advantages: ``[P, G]`` (any shape).
        weights: optional non-negative weights of the same number of entries, e.g. response
            lengths, so a completion's mass is ``|A_i| * T_i``.

    Returns:
        ``(sum of positive mass, sum of negative mass) / total mass``; ``(nan, nan)`` when the total is
        0 (every advantage zero: there is no share to measure, and averaging a 0 in would bias a mean
        over steps towards 0).
    """
    a = advantages.double().flatten()  # [N]
    mass = a.abs()
    if weights is not None:
        require(
            weights.numel() == a.numel(), f"weights has {weights.numel()} entries, advantages {a.numel()}"
        )
        mass = mass * weights.double().flatten()
    total = mass.sum()
    if total == 0:
        return math.nan, math.nan
    return (mass[a > 0].sum() / total).item(), (mass[a < 0].sum() / total).item()
