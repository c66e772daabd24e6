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
from collections.abc import Callable
from typing import Literal, get_args

import torch
from torch import Tensor

from lit_grpo.checks import require

StdKind = Literal["sample", "population"]
ScaleKind = Literal["group", "batch", "none"]
AllCorrectKind = Literal["zero", "push"]
PassAtKVariant = Literal["unbiased", "normalized"]
GPGNorm = Literal["none", "std"]
#: Sums a small float64 vector ``[K]`` over the batch's shards (data-parallel ranks); see
#: :func:`sum_over_ranks`.
Reduce = Callable[[Tensor], Tensor]

#: A group is constant when the spread (max - min) of its scorable rewards is at most
#: ``CONSTANT_RTOL * max(1, max |r|)``: about 8 float32 ulps for rewards in [0, 1]. The one definition of a
#: constant group: the estimators, ``GRPOModule(filter_degenerate=True)`` and the degeneracy diagnostics use
#: it.
CONSTANT_RTOL = 1e-6
#: SignBalance counts a reward as correct when it is at least this value.
CORRECT_THRESHOLD = 0.5


# ---------------------------------------------------------------------------------------------
# validation


def check_choice(option: str, value: object, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    require(isinstance(value, str) and value in choices,
            f"{option} must be one of {', '.join(map(repr, choices))}; got {value!r}")


def check_positive(option: str, value: object, example: str) -> None:
    """Raise unless ``value`` is a finite real number > 0; ``example`` is a valid value to suggest."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{option} must be a number, got {type(value).__name__} {value!r}; use e.g. {example}"
        )
    require(
        math.isfinite(value) and value > 0,
        f"{option} must be finite and > 0, got {value!r}; use e.g. {example}",
    )


def check_rewards(rewards: Tensor) -> None:
    """Raise unless ``rewards`` is a floating ``[P, G]`` tensor with ``G >= 1`` and no infinity."""
    if not isinstance(rewards, Tensor):
        raise TypeError(f"rewards must be a torch.Tensor [P, G], got {type(rewards).__name__}")
    require(rewards.ndim == 2 and rewards.shape[1] > 0,
            f"rewards must have shape [P, G] with G >= 1, got {tuple(rewards.shape)}; "
            "reshape flat rewards [N] with rewards.view(P, G)")
    if not rewards.is_floating_point():
        raise TypeError(
            f"rewards must be a floating tensor (NaN marks an unscorable completion), got {rewards.dtype}; "
            "convert with rewards.float()"
        )
    n_inf = int(rewards.isinf().sum())
    require(n_inf == 0,
            f"rewards contain {n_inf} infinite value(s); reward functions must return finite scores "
            "and NaN for a completion that cannot be scored")


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
    never tested for exact equality, so float noise does not become an advantage. Computed in float64,
    as the estimators compute, whatever the rewards' dtype.
    """
    rewards = rewards.to(torch.float64)
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
    rewards: Tensor,
    std: StdKind = "sample",
    eps: float = 1e-6,
    scale: ScaleKind = "group",
    reduce: Reduce | None = None,
) -> Tensor:
    """``(r_i - mu) / (sd + eps)``; ``scale`` picks the sd: the group's, the batch's, or none (1).

    With ``scale="batch"`` the sd is that of every scorable reward of the batch; ``reduce`` (e.g.
    :func:`sum_over_ranks`) makes the batch the global one of all data-parallel ranks.
    """
    check_choice("std", std, get_args(StdKind))
    check_choice("scale", scale, get_args(ScaleKind))
    check_positive("eps", eps, "1e-6")
    r = _prepare(rewards)  # [P, G]
    adv = centred(r)  # [P, G]
    if scale == "group":
        adv = adv / (group_std(r, std) + eps)
    elif scale == "batch":
        adv = adv / (batch_std(r, std, reduce) + eps)
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
    require(n_neg == 0,
            f"MaxRL normalises by the group's success rate and needs rewards >= 0, got {n_neg} negative "
            "reward(s); rescale the rewards to [0, 1] or use GRPO or DrGRPO")
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


# ---------------------------------------------------------------------------------------------
# statistics over the whole batch. Under data parallelism each rank holds a shard of the batch; a
# ``reduce`` callable sums the few numbers these statistics need over the shards, so every rank uses
# the same global value and the multi-rank update equals the one-process update on the global batch.


def check_count(option: str, value: object, minimum: int, example: str) -> None:
    """Raise unless ``value`` is an integer >= ``minimum``; ``example`` is a valid value to suggest."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{option} must be an integer, got {type(value).__name__} {value!r}; use e.g. {example}"
        )
    require(value >= minimum, f"{option} must be >= {minimum}, got {value!r}; use e.g. {example}")


def sum_over_ranks(values: Tensor) -> Tensor:
    """``values [K]`` summed over the ranks of the default process group; unchanged in one process.

    lit-grpo's ranks are all data-parallel (the policy is never tensor-parallel), so the default group
    is the data-parallel one. This is a collective: with several ranks, every rank must call it at the
    same point, as the training step does when it calls the estimator once per step on every rank.
    """
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    total = values.detach().to(device=device, dtype=torch.float64, copy=True)  # [K]
    dist.all_reduce(total)
    return total.to(values.device)


def _sum(values: Tensor, reduce: Reduce | None) -> Tensor:
    """``values [K]``, summed over the shards of the batch when ``reduce`` is given."""
    return values if reduce is None else reduce(values)


def batch_std(values: Tensor, std: StdKind = "sample", reduce: Reduce | None = None) -> Tensor:
    """Std of the non-NaN entries of ``values [P, G]`` over the whole batch: ``[]`` float64, 0 if undefined.

    Two passes (the global mean, then the squared deviations from it), so shards of any size, empty
    ones included, give the std of their concatenation.
    """
    check_choice("std", std, get_args(StdKind))
    scorable = ~values.isnan()  # [P, G]
    x = values.where(scorable, 0.0).to(torch.float64)  # [P, G]
    n, total = _sum(torch.stack([scorable.sum().to(torch.float64), x.sum()]), reduce).unbind()
    dev = (x - total / n.clamp(min=1)).where(scorable, 0.0)  # [P, G]
    squares = _sum(dev.square().sum().reshape(1), reduce)[0]
    dof = n - (1 if std == "sample" else 0)
    return (squares / dof.clamp(min=1)).sqrt().where(dof > 0, 0.0)


def reinforce_pp_advantages(
    rewards: Tensor, std: StdKind = "sample", eps: float = 1e-6, reduce: Reduce | None = None
) -> Tensor:
    """REINFORCE++-baseline: ``(r_i - mu) / (sd_B + eps)``.

    ``mu`` is the group mean; ``sd_B`` the std, over every scorable completion of the batch, of the
    group-centred rewards (constant groups count with their 0). Their batch mean is 0 by construction,
    so whitening them reduces to this division.
    """
    check_choice("std", std, get_args(StdKind))
    check_positive("eps", eps, "1e-6")
    r = _prepare(rewards)  # [P, G]
    adv = centred(r)  # [P, G], 0 on unscorable entries and constant groups
    sd = batch_std(adv.where(~r.isnan(), math.nan), std, reduce)  # []
    return _finish(adv / (sd + eps), r)


def gpg_advantages(
    rewards: Tensor, normalize: GPGNorm = "none", eps: float = 1e-6, reduce: Reduce | None = None
) -> Tensor:
    """GPG: ``alpha * (r_i - mu) / F`` with ``alpha = B / (B - M)``.

    ``F`` is 1 (``normalize="none"``) or the group's sample std + eps (``"std"``). ``B`` counts the
    scorable completions of the batch, ``M`` those in constant groups (whose advantage is 0); alpha is
    1 when every group is constant.
    """
    check_choice("normalize", normalize, get_args(GPGNorm))
    check_positive("eps", eps, "1e-6")
    r = _prepare(rewards)  # [P, G]
    scorable = ~r.isnan()  # [P, G]
    valid = scorable & ~constant_groups(r)  # [P, G]
    b, v = _sum(torch.stack([scorable.sum(), valid.sum()]).to(torch.float64), reduce).unbind()
    alpha = (b / v.clamp(min=1)).where(v > 0, 1.0)  # [], B / (B - M)
    adv = centred(r)  # [P, G]
    if normalize == "std":
        adv = adv / (group_std(r, "sample") + eps)
    return _finish(alpha * adv, r)


# ---------------------------------------------------------------------------------------------
# pass@k objective (binary rewards)


def _binomial_ratio(top: Tensor, bottom: Tensor, j: int) -> Tensor:
    """``C(top, j) / C(bottom, j) = prod_{i < j} (top - i) / (bottom - i)``, 0 where ``top < j``.

    Elementwise on float tensors of integers with ``bottom >= j`` (other entries are not meaningful).
    """
    out = torch.ones_like(top)
    for i in range(j):
        out = out * ((top - i) / (bottom - i)).clamp(min=0)
    return out


def pass_at_k_advantages(rewards: Tensor, k: int = 4, variant: PassAtKVariant = "unbiased") -> Tensor:
    """Advantages for the pass@k objective from the n scorable completions of a group, c of them correct.

    A completion is correct when ``r >= 0.5``. With ``rho = 1 - C(n - c, k) / C(n, k)`` the unbiased
    pass@k estimate of the group:

    - ``"unbiased"`` (PKPO's ``s^(loo-1)``, scaled by n): correct ``k * C(n-c, k-1) / C(n-1, k-1)``,
      wrong 0; ``E[sum_i A_i grad log p_i] / n = grad pass@k``;
    - ``"normalized"`` (Pass@k Training's analytic advantage): correct ``(1 - rho) / sigma``, wrong
      ``(1 - rho - C(n-c-1, k-1) / C(n-1, k-1)) / sigma``, ``sigma = sqrt(rho (1 - rho))``; 0 when
      ``rho`` is 0 or 1.

    A group with fewer than k scorable completions gives 0.
    """
    check_count("k", k, 1, "4")
    check_choice("variant", variant, get_args(PassAtKVariant))
    r = _prepare(rewards)  # [P, G]
    correct = r >= CORRECT_THRESHOLD  # [P, G], False on NaN
    n = group_count(r)  # [P, 1]
    c = correct.sum(-1, keepdim=True).to(r.dtype)  # [P, 1]
    if variant == "unbiased":
        adv = torch.where(correct, k * _binomial_ratio(n - c, n - 1, k - 1), 0.0)  # [P, G]
        signal = n >= k  # [P, 1]
    else:
        fail = _binomial_ratio(n - c, n, k)  # [P, 1], 1 - rho
        sigma = (fail * (1 - fail)).sqrt()  # [P, 1]
        neg = fail - _binomial_ratio(n - c - 1, n - 1, k - 1)  # [P, 1]
        adv = torch.where(correct, fail, neg) / sigma  # [P, G]
        signal = (n >= k) & (c > 0) & (fail > 0)  # [P, 1], rho strictly inside (0, 1)
    return _finish(adv.where(signal, 0.0), r)


# ---------------------------------------------------------------------------------------------
# length-weighted baseline: needs the completion lengths (an estimator that uses them declares needs_lengths)


def check_lengths(lengths: Tensor, rewards: Tensor) -> Tensor:
    """``lengths [P, G]`` (completion tokens, >= 0, finite) validated against ``rewards``, as float64."""
    if not isinstance(lengths, Tensor):
        raise TypeError(f"lengths must be a torch.Tensor [P, G], got {type(lengths).__name__}")
    require(lengths.shape == rewards.shape,
            f"lengths must have the rewards' shape {tuple(rewards.shape)}, got {tuple(lengths.shape)}; "
            "pass the completion lengths as lengths.view(P, G)")
    if lengths.dtype == torch.bool or lengths.is_complex():
        raise TypeError(f"lengths must be integer or floating token counts, got {lengths.dtype}")
    out = lengths.detach().to(torch.float64)  # [P, G]
    bad = int((~out.isfinite() | (out < 0)).sum())
    require(
        not bad,
        f"lengths contain {bad} negative or non-finite value(s); pass the number of completion tokens",
    )
    return out


def opo_advantages(rewards: Tensor, lengths: Tensor) -> Tensor:
    """OPO: ``r_i - b`` with the length-weighted baseline ``b = sum_j l_j r_j / sum_j l_j``.

    Sums over the group's scorable completions; ``l`` are the completion lengths ``[P, G]``. Constant
    groups, and groups whose scorable completions have no tokens, give exactly 0.
    """
    r = _prepare(rewards)  # [P, G]
    scorable = ~r.isnan()  # [P, G]
    w = check_lengths(lengths, r).where(scorable, 0.0)  # [P, G]
    total = w.sum(-1, keepdim=True)  # [P, 1]
    b = (w * r.where(scorable, 0.0)).sum(-1, keepdim=True) / total.where(total > 0, 1.0)  # [P, 1]
    adv = (r - b).where(~constant_groups(r) & (total > 0), 0.0)  # [P, G]
    return _finish(adv, r)
