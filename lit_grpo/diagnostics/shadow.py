"""Shadow estimators: every estimator applied to the same rewards and the same gradient rows.

The run's rewards ``[P, G]`` give each estimator ``e`` its advantages ``A_e [P, G]``. With the rows
``g_i = w_i * grad sum_t log pi(y_i,t)`` of the step's completions (``w_i`` the loss aggregation's weight
of completion ``i``, :func:`sequence_weights`), the policy-gradient direction of ``e`` is
``d_e = sum_i A_e,i g_i``: one product ``A [E, N] @ rows [N, D]`` for all estimators, so the rows are
computed once whatever the number of estimators. This module holds the pure pieces: starved groups,
budgets by bin, directions, cosines and readable labels.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence

import torch
from torch import Tensor

from lit_grpo.diagnostics.budget import NUM_BINS, advantage_budget, bin_index


def starved_groups(advantages: Tensor) -> Tensor:
    """Groups whose advantages are all exactly 0 (the estimator gives them no signal): ``[P, G] -> [P]``
    bool."""
    return (advantages == 0).all(-1)


def budget_by_bin(advantages: Tensor, lengths: Tensor, pass_rate: Tensor) -> Tensor:
    """Budget ``sum_i |A_i| T_i`` summed over the prompts of each difficulty bin: ``[5]`` float64.

    Args:
        advantages: ``[P, G]``.
        lengths: ``[P, G]`` or ``[N]`` group-major completion tokens.
        pass_rate: ``[P]``; prompts outside [0, 1] or NaN are left out.
    """
    budget = advantage_budget(advantages, lengths)  # [P]
    index = bin_index(pass_rate)  # [P], -1 = unbinned
    keep = index >= 0
    totals = torch.zeros(NUM_BINS, dtype=torch.float64)  # [5]
    totals.index_add_(0, index[keep].cpu(), budget[keep].cpu())
    return totals


def sequence_weights(lengths: Tensor, aggregation: str | None) -> Tensor:
    """Per-completion weight ``w_i`` of the policy loss, up to one constant for the whole batch: ``[N]``
    float64.

    Every aggregation of METHODS section 2 gives all tokens of a completion the same weight; all but
    ``seq-mean-token-mean`` (``1 / T_i``) give every token of the batch the same weight, so ``w_i = 1``.
    """
    lengths = lengths.double()
    if aggregation == "seq-mean-token-mean":
        return 1.0 / lengths.clamp(min=1)
    return torch.ones_like(lengths)


def cosine_matrix(directions: Tensor) -> Tensor:
    """Cosines between the rows of ``directions [E, D]``: ``[E, E]`` float64, NaN where a row is zero."""
    d = directions.double()
    norms = torch.linalg.vector_norm(d, dim=1)  # [E]
    gram = d @ d.T  # [E, E]
    cos = gram / (norms[:, None] * norms[None, :])
    zero = norms == 0
    cos[zero, :] = math.nan
    cos[:, zero] = math.nan
    return cos.clamp(-1.0, 1.0)


def estimator_label(estimator: object) -> str:
    """``ClassName``, or ``ClassName:key=value,...`` listing the constructor arguments that differ from
    their defaults (the syntax of ``lit-grpo curves --estimators``)."""
    cls = type(estimator)
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        params = {}
    changed = [
        f"{k}={v}"
        for k, v in vars(estimator).items()
        if k in params and params[k].default is not inspect.Parameter.empty and params[k].default != v
    ]
    return cls.__name__ + (":" + ",".join(changed) if changed else "")


def unique_labels(estimators: Sequence[object]) -> list[str]:
    """:func:`estimator_label` of each estimator, with ``#2``, ``#3`` ... appended to repeated labels."""
    labels: list[str] = []
    for estimator in estimators:
        label = estimator_label(estimator)
        seen = sum(1 for x in labels if x == label or x.startswith(label + "#"))
        labels.append(label if not seen else f"{label}#{seen + 1}")
    return labels
