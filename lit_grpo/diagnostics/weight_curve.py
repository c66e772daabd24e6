"""Estimator weight curve omega(p) by exact enumeration (METHODS.md section 3).

For binary rewards, group size ``G`` and a policy whose completions succeed independently with
probability ``p``, the number of correct completions is ``K ~ Bin(G, p)``. With ``A+(K)``, ``A-(K)``
the estimator's advantages of a correct and of a wrong completion in a group with ``K`` correct,

    omega(p) = (1/G) * sum_K Bin(K; G, p) * [K * A+(K) / p - (G - K) * A-(K) / (1 - p)],

the expected update divided by the gradient of ``p``. The estimator is any callable
``rewards [P, G] -> advantages [P, G]`` (an ``AdvantageEstimator`` or a plain function) that treats
each group on its own: an estimator whose ``couples_groups`` is true (GRPO with ``scale="batch"``,
ReinforcePlusPlus, GPG) scales every group by a number taken from the whole batch, so one group has no
curve of its own; it is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.diagnostics.budget import advantage_mass
from lit_grpo.estimators.base import AdvantageEstimator

Estimator = Callable[[Tensor], Tensor]

#: Pass rates of the printed table (:func:`format_table`).
TABLE_PS = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)


def binary_groups(G: int) -> Tensor:
    """``[G + 1, G]`` float32 binary groups; row ``K`` has its first ``K`` completions correct."""
    require(G >= 1, f"group size G must be >= 1, got {G}")
    k = torch.arange(G + 1).unsqueeze(-1)  # [G + 1, 1]
    return (torch.arange(G) < k).float()  # [G + 1, G]


def _advantages(estimator: Estimator, G: int) -> Tensor:
    require(
        not (isinstance(estimator, AdvantageEstimator) and estimator.couples_groups),
        f"{estimator!r} scales every group by a statistic of the whole batch, so omega(p) of one group "
        "is not defined; its curve is that of its per-group part (DrGRPO's for GPG and ReinforcePlusPlus, "
        "GRPO scale=none's for GRPO scale=batch) times that batch-dependent factor",
    )
    min_g = getattr(estimator, "min_group_size", 1)
    require(G >= min_g, f"group size G={G} is below the estimator's min_group_size={min_g}")
    groups = binary_groups(G)
    # estimators get equal completion lengths (a length-weighted baseline, OPO's, is then the group mean)
    adv = estimator(groups, lengths=torch.ones(G + 1, G)) if isinstance(estimator, AdvantageEstimator) \
        else estimator(groups)
    adv = adv.detach().double()  # [G + 1, G]
    require(
        adv.shape == (G + 1, G),
        f"estimator returned shape {tuple(adv.shape)} for rewards of shape {(G + 1, G)}",
    )
    return adv


def plus_minus_advantages(estimator: Estimator, G: int) -> tuple[Tensor, Tensor]:
    """``A+(K)`` and ``A-(K)`` for ``K = 0 .. G``, each ``[G + 1]`` float64.

    Each is the mean advantage of the correct (wrong) completions of the group with ``K`` correct;
    ``A+(0)`` and ``A-(G)`` do not exist and are set to 0.
    """
    rewards = binary_groups(G).double()  # [G + 1, G]
    adv = _advantages(estimator, G)  # [G + 1, G]
    n_pos = rewards.sum(-1)  # [G + 1] = K
    n_neg = G - n_pos
    a_plus = (adv * rewards).sum(-1) / n_pos.clamp(min=1)  # [G + 1]
    a_minus = (adv * (1 - rewards)).sum(-1) / n_neg.clamp(min=1)  # [G + 1]
    return a_plus, a_minus


def weight_curve(estimator: Estimator, G: int, ps: Sequence[float] | Tensor) -> Tensor:
    """``omega(p)`` of ``estimator`` at group size ``G`` for each pass rate in ``ps [M]``, all in (0, 1).

    Returns:
        ``[M]`` float64.
    """
    p = torch.as_tensor(ps, dtype=torch.float64).flatten()  # [M]
    require(
        bool(((p > 0) & (p < 1)).all()), f"pass rates ps must lie strictly inside (0, 1), got {p.tolist()}"
    )
    a_plus, a_minus = plus_minus_advantages(estimator, G)  # [G + 1] each
    k = torch.arange(G + 1, dtype=torch.float64)  # [G + 1]
    comb = torch.tensor([math.comb(G, int(j)) for j in k], dtype=torch.float64)  # [G + 1]
    pmf = comb * p.unsqueeze(-1) ** k * (1 - p.unsqueeze(-1)) ** (G - k)  # [M, G + 1]
    term = k * a_plus / p.unsqueeze(-1) - (G - k) * a_minus / (1 - p.unsqueeze(-1))  # [M, G + 1]
    return (pmf * term).sum(-1) / G  # [M]


def advantage_mass_by_k(estimator: Estimator, G: int) -> Tensor:
    """Advantage mass ``sum_i |A_i| / 2`` of the binary group with ``K`` correct, ``K = 0 .. G``:
    ``[G + 1]``."""
    return advantage_mass(_advantages(estimator, G))  # [G + 1]


def format_table(values: dict[str, Tensor], ps: Sequence[float]) -> str:
    """A markdown table of omega(p): one row per estimator, one column per pass rate."""
    width = max(len(name) for name in values)
    head = f"| {'estimator':<{width}} | " + " | ".join(f"p={p:<5g}" for p in ps) + " |"
    rule = "|" + "-" * (width + 2) + "|" + "|".join("-" * 9 for _ in ps) + "|"
    rows = [
        f"| {name:<{width}} | " + " | ".join(f"{v:7.4f}" for v in omega.tolist()) + " |"
        for name, omega in values.items()
    ]
    return "\n".join([head, rule, *rows])
