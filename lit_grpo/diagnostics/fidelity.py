"""Gradient fidelity: every estimator's size-G estimate against a large-group reference (METHODS.md section
3).

For one prompt, a pool of ``M`` completions (``M >= 256``) with binary rewards ``r [M]`` and score rows
``g_j = grad sum_t log pi(y_j,t)`` is drawn once. From it: the reference gradient of each objective with
unbiased pool coefficients (:func:`reference_coefficients`, :func:`objective_derivative`), ``S`` subsamples
of ``G`` completions turned by the estimator into weights ``[S, M]`` times the rows, their fidelity (cosine,
norm ratio, variance, signal-to-noise) and the measured weight ``omega`` against :func:`pool_weight`. The
rows are centred on their pool mean first (a control variate). docs/diagnostics.md ("GradientFidelity")
states each quantity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.diagnostics.budget import BIN_LABELS, bin_index
from lit_grpo.diagnostics.weight_curve import plus_minus_advantages
from lit_grpo.estimators.base import AdvantageEstimator

Estimator = Callable[[Tensor], Tensor]
Objective = Literal["reward", "pass@k", "log_pass@k", "maxrl"]
OBJECTIVES: tuple[str, ...] = ("reward", "pass@k", "log_pass@k", "maxrl")
#: Label of the bin holding every prompt.
ALL = "all"


def check_pool(rewards: Tensor) -> Tensor:
    """``rewards [M]`` validated as binary (0 or 1, no NaN), as float64."""
    require(rewards.dim() == 1 and rewards.numel() >= 2,
            f"pool rewards must have shape [M] with M >= 2, got {tuple(rewards.shape)}")
    r = rewards.detach().double()
    bad = r[(r != 0) & (r != 1)]
    first = bad[0].item() if bad.numel() else None
    require(
        not bad.numel(),
        f"gradient fidelity needs binary rewards (0 or 1), got {first!r}; use a binary reward such as "
        "lit_grpo.ExactMatch, and score unscorable completions as 0",
    )
    return r


def _check_objective(objective: str, k: int, T: int, M: int) -> None:
    require(
        objective in OBJECTIVES, f"objective {objective!r} is not known; choose from {', '.join(OBJECTIVES)}"
    )
    require(objective not in ("pass@k", "log_pass@k") or 1 <= k <= M,
            f"{objective} needs 1 <= k <= M (the pool size {M}), got k={k}")
    require(
        objective != "maxrl" or 1 <= T <= M,
        f"maxrl needs a truncation 1 <= T <= M (the pool size {M}), got T={T}",
    )


def objective_derivative(objective: Objective, p: Tensor | float, k: int = 1, T: int = 1) -> Tensor:
    """``J'(p)``, with ``grad J = J'(p) grad p`` for binary rewards: ``[...]`` float64 like ``p``.

    reward: 1; pass@k: ``k (1-p)^(k-1)``; log_pass@k: ``k (1-p)^(k-1) / (1 - (1-p)^k)``;
    maxrl: ``(1 - (1-p)^T) / p`` (``T`` at ``p = 0``).
    """
    _check_objective(objective, k, T, max(k, T))
    p = torch.as_tensor(p, dtype=torch.float64)
    q = 1 - p
    if objective == "reward":
        return torch.ones_like(p)
    if objective == "pass@k":
        return k * q ** (k - 1)
    if objective == "log_pass@k":
        return k * q ** (k - 1) / (1 - q**k)
    return torch.where(p > 0, (1 - q**T) / p.clamp(min=1e-300), torch.full_like(p, float(T)))


def _pass_at_k_coefficients(r: Tensor, k: int) -> Tensor:
    """``c [M]`` with ``c @ rows`` an unbiased estimate of ``grad pass@k`` from the pool.

    k = 1: ``(r_j - mean r) / (M - 1)`` (REINFORCE with the leave-one-out baseline). k >= 2: PKPO's
    ``s^(loo-1)`` over the whole pool divided by ``M``: ``k C(M-c, k-1) / C(M-1, k-1) / M`` on each correct
    completion, 0 on a wrong one (lit_grpo's ``PassAtK`` ``unbiased`` advantage).
    """
    M = r.numel()
    if k == 1:
        return (r - r.mean()) / (M - 1)
    c = int(r.sum().item())
    a = k * math.comb(M - c, k - 1) / math.comb(M - 1, k - 1) if c > 0 else 0.0
    return r * (a / M)


def reference_coefficients(rewards: Tensor, objective: Objective, k: int = 1, T: int = 1) -> Tensor:
    """``c [M]`` float64 such that ``c @ rows`` estimates ``grad J`` from the pool (rows = score rows).

    ``log_pass@k`` divides the ``pass@k`` estimate by the pool's unbiased pass@k (0 when no completion is
    correct); ``maxrl`` sums ``pass@j`` coefficients over ``j = 1 .. T`` with weights ``1 / j``.
    """
    r = check_pool(rewards)
    M = r.numel()
    _check_objective(objective, k, T, M)
    if objective == "reward":
        return _pass_at_k_coefficients(r, 1)
    if objective == "pass@k":
        return _pass_at_k_coefficients(r, k)
    if objective == "log_pass@k":
        c = int(r.sum().item())
        rate = 1.0 - math.comb(M - c, k) / math.comb(M, k)
        return _pass_at_k_coefficients(r, k) / rate if rate > 0 else torch.zeros_like(r)
    return sum(_pass_at_k_coefficients(r, j) / j for j in range(1, T + 1))


def subsample_indices(M: int, G: int, S: int, generator: torch.Generator | None = None) -> Tensor:
    """``[S, G]`` long: ``S`` subsets of ``G`` distinct pool indices, each uniformly random."""
    require(1 <= G <= M, f"group size G={G} must lie in [1, M={M}] (the pool size)")
    require(S >= 2, f"subsamples S={S} must be >= 2 (the variance needs two)")
    return torch.rand(S, M, generator=generator).argsort(-1)[:, :G]


def subsample_weights(estimator: Estimator, rewards: Tensor, index: Tensor) -> Tensor:
    """``W [S, M]`` float64 with ``W @ rows`` the estimates ``(1/G) sum_i A_i g_i`` of the ``S`` subsamples.

    The estimator sees the ``S`` subsamples as ``S`` groups of one batch, so an estimator whose
    ``couples_groups`` is true (a batch statistic) is refused, as is one that ``needs_lengths``.
    """
    known = isinstance(estimator, AdvantageEstimator)
    require(
        not (known and estimator.couples_groups),
        f"{estimator!r} scales every group by a statistic of the whole batch, so its estimate from one "
        "prompt's subsample is not defined; measure its per-group part instead (DrGRPO for GPG and "
        "ReinforcePlusPlus, GRPO scale=none for GRPO scale=batch)",
    )
    require(
        not (known and estimator.needs_lengths),
        f"{estimator!r} needs the completions' lengths, which a fidelity pool does not keep; measure "
        "estimators that do not (DrGRPO is OPO with equal lengths)",
    )
    S, G = index.shape
    adv = estimator(rewards[index].float()).double()  # [S, G]
    require(adv.shape == (S, G), f"estimator returned shape {tuple(adv.shape)} for rewards of shape {(S, G)}")
    w = torch.zeros(S, rewards.numel(), dtype=torch.float64)  # [S, M]
    return w.scatter_add_(1, index, adv / G)


def coordinates(rows: Tensor) -> Tensor:
    """``[M, d]`` float64 with ``d = min(M, D)``: inner products of any combinations ``a @ rows`` and
    ``b @ rows`` equal those of ``a @ coords`` and ``b @ coords``.

    ``rows`` itself when ``D <= M``; otherwise ``V sqrt(L)`` from the Gram matrix ``rows rows^T = V L V^T``.
    """
    x = rows.double()
    if x.shape[1] <= x.shape[0]:
        return x
    evals, evecs = torch.linalg.eigh(x @ x.T)  # [M], [M, M]
    return evecs * evals.clamp(min=0).sqrt()


def pool_weight(estimator: Estimator, G: int, M: int, c: int) -> float:
    """The exact subsample expectation of the measured ``omega`` for a centred pool of ``M`` with ``c``
    correct.

    ``(M - 1) / M * (1/G) sum_K Hyp(K; M, c, G) [K A+(K) / p - (G - K) A-(K) / (1 - p)]`` with ``p = c / M``:
    :func:`~lit_grpo.diagnostics.weight_curve.weight_curve`'s formula with the hypergeometric law of ``K``
    (subsamples without replacement), for any estimator whose advantages depend on the group's ``K`` only.
    It tends to ``omega(p)`` as ``M`` grows. NaN for ``c`` of 0 or ``M`` (no reference direction).
    """
    if not 0 < c < M:
        return math.nan
    a_plus, a_minus = plus_minus_advantages(estimator, G)  # [G + 1] each
    p = c / M
    total = 0.0
    for K in range(max(0, G - (M - c)), min(G, c) + 1):
        hyp = math.comb(c, K) * math.comb(M - c, G - K) / math.comb(M, G)
        total += hyp * (K * a_plus[K].item() / p - (G - K) * a_minus[K].item() / (1 - p))
    return (M - 1) / M * total / G


@dataclass
class PromptFidelity:
    """One prompt's pool, summarised: vectors are in the rows' space ``[D]``, float64."""

    pass_rate: float  # c / M
    num_correct: int  # c
    references: dict[str, Tensor]  # objective -> grad J estimate [D]
    means: dict[str, Tensor] = field(default_factory=dict)  # estimator -> subsample mean [D]
    variances: dict[str, float] = field(default_factory=dict)  # estimator -> E |ghat - mean|^2
    omegas: dict[str, float] = field(default_factory=dict)  # estimator -> measured omega (NaN: undefined)
    omega_ses: dict[str, float] = field(default_factory=dict)  # estimator -> its Monte-Carlo standard error


def prompt_fidelity(
    rows: Tensor,
    rewards: Tensor,
    estimators: dict[str, Estimator],
    G: int,
    S: int,
    objectives: Sequence[Objective] = OBJECTIVES,
    k: int = 1,
    T: int = 1,
    generator: torch.Generator | None = None,
) -> PromptFidelity:
    """Fidelity of each estimator on one prompt's pool.

    Args:
        rows: ``[M, D]`` score rows ``grad sum_t log pi(y_j,t)`` of the pool's completions.
        rewards: ``[M]`` binary rewards.
        estimators: ``{label: estimator}``; all see the same ``S`` subsamples (paired).
        G: Group size of the estimates.
        S: Subsamples.
        objectives: References to form.
        k: The k of ``pass@k`` and ``log_pass@k``.
        T: The truncation of ``maxrl``.
        generator: Draws the subsamples.
    """
    r = check_pool(rewards)
    M = r.numel()
    require(rows.shape[0] == M, f"rows has {rows.shape[0]} rows for {M} rewards; give one row per completion")
    x = rows.double()
    x = x - x.mean(0, keepdim=True)  # [M, D], the control variate of the module docstring
    coords = coordinates(x)  # [M, d]
    c = int(r.sum().item())
    refs = {o: reference_coefficients(r, o, k, T) for o in objectives}  # objective -> [M]
    out = PromptFidelity(c / M, c, {o: coef @ x for o, coef in refs.items()})
    base = _pass_at_k_coefficients(r, 1) @ coords  # [d], grad p in coordinates
    base_sq = base.square().sum()
    index = subsample_indices(M, G, S, generator)  # [S, G]
    for label, estimator in estimators.items():
        w = subsample_weights(estimator, r, index)  # [S, M]
        est = w @ coords  # [S, d]
        mean = est.mean(0)  # [d]
        out.means[label] = w.mean(0) @ x  # [D]
        out.variances[label] = (est - mean).square().sum(-1).sum().item() / (S - 1)
        if base_sq > 0:
            proj = est @ base / base_sq  # [S]
            out.omegas[label] = proj.mean().item()
            out.omega_ses[label] = proj.std().item() / math.sqrt(S)
        else:
            out.omegas[label] = out.omega_ses[label] = math.nan
    return out


def _cos(a: Tensor, b: Tensor) -> float:
    na, nb = a.norm(), b.norm()
    return (a @ b / (na * nb)).clamp(-1, 1).item() if na > 0 and nb > 0 else math.nan


def bin_rows(
    prompts: Sequence[PromptFidelity], labels: Sequence[str], objectives: Sequence[str]
) -> list[dict]:
    """Per estimator, objective and bin (the five pass-rate bins and ``all``): the prompts, cosine and norm
    ratio of the summed subsample means to the summed references, the summed variance, and
    ``snr = |sum of means| / sqrt(summed variance)``; empty bins are left out."""
    index = bin_index(torch.tensor([p.pass_rate for p in prompts], dtype=torch.float64)).tolist()
    bins = [(ALL, list(range(len(prompts))))]
    bins += [(name, [i for i, b in enumerate(index) if b == j]) for j, name in enumerate(BIN_LABELS)]
    out = []
    for label in labels:
        for name, members in bins:
            if not members:
                continue
            mean = sum(prompts[i].means[label] for i in members)  # [D]
            var = sum(prompts[i].variances[label] for i in members)
            snr = (mean.norm() / math.sqrt(var)).item() if var > 0 else math.nan
            for objective in objectives:
                ref = sum(prompts[i].references[objective] for i in members)  # [D]
                ratio = (mean.norm() / ref.norm()).item() if ref.norm() > 0 else math.nan
                out.append(
                    {
                        "estimator": label,
                        "objective": objective,
                        "bin": name,
                        "prompts": len(members),
                        "cos": _cos(mean, ref),
                        "norm_ratio": ratio,
                        "variance": var,
                        "snr": snr,
                    }
                )
    return out
