"""Pure tensor functions behind the advantage estimators (METHODS.md section 1).

Every ``*_advantages`` function takes ``rewards [P, G]`` (floating, NaN = unscorable), computes in
float64 and returns detached float32 advantages ``[P, G]``. The shared rules:

- unscorable (NaN) rewards are left out of every group statistic and get advantage 0;
- a group whose scorable rewards are all equal within a tolerance (:func:`constant_groups`), or
  that has fewer than two scorable rewards, gives exactly 0 for the centred estimators;
- infinite rewards are an error (:func:`check_rewards`), never clipped silently.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal, get_args

import torch
from torch import Tensor

StdKind = Literal["sample", "population"]
ScaleKind = Literal["group", "batch", "none"]
AllCorrectKind = Literal["zero", "push"]

#: A group is constant when the spread (max - min) of its scorable rewards is at most
#: ``CONSTANT_RTOL * max(1, max |r|)``: about 8 float32 ulps for rewards in [0, 1].
CONSTANT_RTOL = 1e-6
#: SignBalance counts a reward as correct when it is at least this value.
CORRECT_THRESHOLD = 0.5


# ---------------------------------------------------------------------------------------------
# validation


def check_choice(option: str, value: object, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{option} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def check_positive(option: str, value: object, example: str) -> None:
    """Raise unless ``value`` is a finite real number > 0; ``example`` is a valid value to suggest."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{option} must be a number, got {type(value).__name__} {value!r}; use e.g. {example}"
        )
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{option} must be finite and > 0, got {value!r}; use e.g. {example}")


def check_rewards(rewards: Tensor) -> None:
    """Raise unless ``rewards`` is a floating ``[P, G]`` tensor with ``G >= 1`` and no infinity."""
    if not isinstance(rewards, Tensor):
        raise TypeError(f"rewards must be a torch.Tensor [P, G], got {type(rewards).__name__}")
    if rewards.ndim != 2 or rewards.shape[1] == 0:
        raise ValueError(
            f"rewards must have shape [P, G] with G >= 1, got {tuple(rewards.shape)}; "
            "reshape flat rewards [N] with rewards.view(P, G)"
        )
    if not rewards.is_floating_point():
        raise TypeError(
            f"rewards must be a floating tensor (NaN marks an unscorable completion), got {rewards.dtype}; "
            "convert with rewards.float()"
        )
    n_inf = int(rewards.isinf().sum())
    if n_inf:
        raise ValueError(
            f"rewards contain {n_inf} infinite value(s); reward functions must return finite scores "
            "and NaN for a completion that cannot be scored"
        )


# ---------------------------------------------------------------------------------------------
# group statistics over scorable entries (any floating dtype; NaN = left out)


def group_count(rewards: Tensor) -> Tensor:
    """Number of scorable rewards per group: ``[P, G] -> [P, 1]`` in the rewards' dtype."""
    return (~rewards.isnan()).sum(-1, keepdim=True).to(rewards.dtype)


def group_mean(rewards: Tensor) -> Tensor:
    """Mean of the scorable rewards per group, 0 for a group with none: ``[P, G] -> [P, 1]``."""
    total = rewards.where(~rewards.isnan(), 0.0).sum(-1, keepdim=True)  # [P, 1]
    return total / group_count(rewards).clamp(min=1)


def group_std(rewards: Tensor, std: StdKind = "sample") -> Tensor:
    """Std of the scorable rewards per group, 0 where undefined: ``[P, G] -> [P, 1]``.

    ``std="sample"`` divides by ``n - 1`` (unbiased variance), ``"population"`` by ``n``.
    """
    check_choice("std", std, get_args(StdKind))
    dof = group_count(rewards) - (1 if std == "sample" else 0)  # [P, 1]
    dev = (rewards - group_mean(rewards)).where(~rewards.isnan(), 0.0)  # [P, G]
    var = dev.square().sum(-1, keepdim=True) / dof.clamp(min=1)  # [P, 1]
    return var.sqrt().where(dof > 0, 0.0)


def constant_groups(rewards: Tensor, rtol: float = CONSTANT_RTOL) -> Tensor:
    """Groups with at most one scorable reward or a spread within tolerance: ``[P, G] -> [P, 1]`` bool.

    The spread ``max - min`` of the scorable rewards is compared with ``rtol * max(1, max |r|)``,
    never tested for exact equality, so float noise does not become an advantage.
    """
    scorable = ~rewards.isnan()  # [P, G]
    hi = rewards.where(scorable, -math.inf).amax(-1, keepdim=True)  # [P, 1]
    lo = rewards.where(scorable, math.inf).amin(-1, keepdim=True)  # [P, 1]
    size = rewards.abs().where(scorable, 0.0).amax(-1, keepdim=True).clamp(min=1)  # [P, 1]
    return (group_count(rewards) <= 1) | (hi - lo <= rtol * size)


def centred(rewards: Tensor) -> Tensor:
    """``r_i - mu`` per group; exactly 0 on unscorable entries and constant groups. ``[P, G]``."""
    dev = (rewards - group_mean(rewards)).where(~rewards.isnan(), 0.0)  # [P, G]
    return dev.where(~constant_groups(rewards), 0.0)


def _prepare(rewards: Tensor) -> Tensor:
    """``rewards [P, G]`` validated, detached, as float64 (never modified in place)."""
    check_rewards(rewards)
    return rewards.detach().to(torch.float64)


def _finish(advantages: Tensor, rewards: Tensor) -> Tensor:
    """Advantage 0 on unscorable entries, as float32. ``[P, G]``."""
    return advantages.where(~rewards.isnan(), 0.0).to(torch.float32)


# ---------------------------------------------------------------------------------------------
# estimators: rewards [P, G] -> advantages [P, G] float32


def grpo_advantages(
    rewards: Tensor, std: StdKind = "sample", eps: float = 1e-6, scale: ScaleKind = "group"
) -> Tensor:
    """``(r_i - mu) / (sd + eps)``; ``scale`` picks the sd: the group's, the batch's, or none (1)."""
    check_choice("std", std, get_args(StdKind))
    check_choice("scale", scale, get_args(ScaleKind))
    check_positive("eps", eps, "1e-6")
    r = _prepare(rewards)  # [P, G]
    adv = centred(r)  # [P, G]
    if scale == "group":
        adv = adv / (group_std(r, std) + eps)
    elif scale == "batch":
        adv = adv / (group_std(r.reshape(1, -1), std) + eps)
    return _finish(adv, r)


def drgrpo_advantages(rewards: Tensor) -> Tensor:
    """``r_i - mu``."""
    r = _prepare(rewards)
    return _finish(centred(r), r)


def rloo_advantages(rewards: Tensor) -> Tensor:
    """``r_i - mean_{j != i} r_j = n / (n - 1) * (r_i - mu)`` over the n scorable entries; 0 if n < 2."""
    r = _prepare(rewards)
    n = group_count(r)  # [P, 1]
    return _finish(centred(r) * n / (n - 1).clamp(min=1), r)


def sign_advantages(rewards: Tensor, all_wrong: str = "push") -> Tensor:
    """``2 r_i - 1``: a fixed reference, no group statistics. ``all_wrong="zero"``: a group whose
    scorable rewards are all 0 (within ``CONSTANT_RTOL``) gets advantage 0 instead of -1 each."""
    check_choice("Sign all_wrong", all_wrong, ("push", "zero"))
    r = _prepare(rewards)
    adv = 2 * r - 1  # [P, G]
    if all_wrong == "zero":
        hi = r.where(~r.isnan(), -math.inf).amax(-1, keepdim=True)  # [P, 1]
        adv = adv.where(~(constant_groups(r) & (hi.abs() <= CONSTANT_RTOL)), 0.0)
    return _finish(adv, r)


def softmax_advantages(rewards: Tensor, tau: float = 0.1) -> Tensor:
    """``n * softmax((r - max r) / tau)_i - 1`` over the n scorable entries; constant groups 0."""
    check_positive("tau", tau, "0.1")
    r = _prepare(rewards)
    scorable = ~r.isnan()  # [P, G]
    top = r.where(scorable, -math.inf).amax(-1, keepdim=True)  # [P, 1]
    logits = ((r - top) / tau).where(scorable, -math.inf)  # [P, G]
    adv = group_count(r) * logits.softmax(-1) - 1  # [P, G], NaN in all-unscorable rows
    return _finish(adv.where(~constant_groups(r), 0.0), r)


def maxrl_advantages(rewards: Tensor, eps: float = 1e-6) -> Tensor:
    """``(r_i - mu) / (mu + eps)``, 0 when ``mu <= CONSTANT_RTOL``; rewards must be >= 0."""
    check_positive("eps", eps, "1e-6")
    r = _prepare(rewards)
    n_neg = int((r < 0).sum())
    if n_neg:
        raise ValueError(
            f"MaxRL normalises by the group's success rate and needs rewards >= 0, got {n_neg} negative "
            "reward(s); rescale the rewards to [0, 1] or use GRPO or DrGRPO"
        )
    mu = group_mean(r)  # [P, 1]
    adv = centred(r) / (mu + eps)  # [P, G]
    return _finish(adv.where(mu > CONSTANT_RTOL, 0.0), r)


def sign_balance_advantages(rewards: Tensor, c: float = 1.0, all_correct: AllCorrectKind = "zero") -> Tensor:
    """Correct (``r >= 0.5``): ``+c``; wrong: ``-c * n+ / n-``; all-wrong 0; all-correct 0 or ``+c``."""
    check_positive("c", c, "1.0")
    check_choice("all_correct", all_correct, get_args(AllCorrectKind))
    r = _prepare(rewards)
    correct = r >= CORRECT_THRESHOLD  # [P, G], False on NaN
    wrong = ~r.isnan() & ~correct  # [P, G]
    n_pos = correct.sum(-1, keepdim=True).to(r.dtype)  # [P, 1]
    n_neg = wrong.sum(-1, keepdim=True).to(r.dtype)  # [P, 1]
    adv = torch.where(correct, c, -c * n_pos / n_neg.clamp(min=1))  # [P, G]
    adv = adv.where(n_pos > 0, 0.0)  # all-wrong groups
    if all_correct == "zero":
        adv = adv.where(n_neg > 0, 0.0)
    return _finish(adv, r)
