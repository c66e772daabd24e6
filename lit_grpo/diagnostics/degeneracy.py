"""Degenerate groups and their i.i.d. predictions (METHODS.md section 3, "Degeneracy").

A group is degenerate when all its scorable rewards are equal: every centred estimator then gives it
zero advantage. With binary rewards a group of ``G`` completions of a prompt that succeeds with
probability ``p`` is degenerate with probability ``f(p) = p^G + (1 - p)^G``. ``f`` is convex, so
the mean of ``f(p_x)`` over prompts of different difficulty is at least ``f`` of the pooled rate
(Jensen): heterogeneous batches are more degenerate than the pooled prediction says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.estimators.functional import CONSTANT_RTOL, constant_groups

#: Keys of :func:`degeneracy_summary`, in order.
SUMMARY_KEYS = (
    "degenerate_frac",
    "all_correct_frac",
    "all_wrong_frac",
    "pooled_success_rate",
    "degenerate_iid_pred",
    "degenerate_excess",
)


def degenerate_groups(rewards: Tensor, atol: float = CONSTANT_RTOL) -> dict[str, Tensor]:
    """Which groups are degenerate, all correct or all wrong.

    Args:
        rewards: ``[P, G]`` float, NaN = unscorable (ignored).
        atol: two rewards closer than ``atol * max(1, max |r|)`` count as equal (a tolerance, never
            ``std == 0``): a group is degenerate exactly when the estimators find it constant
            (:func:`lit_grpo.estimators.functional.constant_groups`).

    Returns:
        ``{"degenerate", "all_correct", "all_wrong"}``, each a ``[P]`` bool mask. A group with at
        most one scorable reward is degenerate (it has no contrast). ``all_correct``: degenerate with
        every scorable reward ``>= 1 - atol``; ``all_wrong``: every scorable reward ``<= atol``. A
        group with no scorable reward is degenerate but neither all correct nor all wrong.
    """
    require(rewards.dim() == 2, f"rewards must have shape [P, G], got {tuple(rewards.shape)}")
    require(atol >= 0, f"atol must be >= 0, got {atol}; pass a small tolerance such as 1e-6")
    rewards = rewards.double()
    scorable = ~torch.isnan(rewards)  # [P, G]
    count = scorable.sum(-1)  # [P]
    hi = torch.where(scorable, rewards, -math.inf).amax(-1)  # [P]
    lo = torch.where(scorable, rewards, math.inf).amin(-1)  # [P]
    degenerate = constant_groups(rewards, atol).squeeze(-1)  # [P]
    some = count >= 1
    return {
        "degenerate": degenerate,
        "all_correct": degenerate & some & (lo >= 1 - atol),
        "all_wrong": degenerate & some & (hi <= atol),
    }


def iid_degeneracy(p: float | Tensor, G: int) -> float | Tensor:
    """``f(p) = p^G + (1 - p)^G``: chance that ``G`` i.i.d. binary draws with success rate ``p`` agree.

    ``p`` is a float or a tensor of any shape (the result has the same type and shape).
    """
    require(G >= 1, f"group size G must be >= 1, got {G}")
    return p**G + (1 - p) ** G


def unbiased_iid_degeneracy(n: int, c: int | Tensor, G: int) -> float | Tensor:
    """Unbiased estimate of ``f(p)`` from ``n`` samples of which ``c`` are correct.

    ``(C(c, G) + C(n - c, G)) / C(n, G)``: the chance that ``G`` of the ``n`` samples drawn without
    replacement all agree. Plugging ``c / n`` into :func:`iid_degeneracy` instead is biased upwards
    (``f`` is convex). ``c`` is an int (exact rational arithmetic, returns a float) or a tensor of
    counts of any shape (float64 products, returns a float64 tensor of that shape).
    """
    require(G >= 1, f"group size G must be >= 1, got {G}")
    require(n >= G,
            f"unbiased_iid_degeneracy needs n >= G samples, got n={n} < G={G}; "
            "draw at least G samples per prompt or use iid_degeneracy(c / n, G)")
    if isinstance(c, Tensor):
        require(not bool(((c < 0) | (c > n)).any()),
                f"counts c must lie in [0, n={n}], got min {c.min()} max {c.max()}")
        c = c.double()
        i = torch.arange(G, dtype=torch.float64)  # [G]
        denom = n - i  # [G]
        pos = ((c.unsqueeze(-1) - i) / denom).clamp(min=0).prod(-1)  # C(c, G) / C(n, G)
        neg = ((n - c.unsqueeze(-1) - i) / denom).clamp(min=0).prod(-1)  # C(n - c, G) / C(n, G)
        return pos + neg
    require(0 <= c <= n, f"count c must lie in [0, n={n}], got c={c}")
    return float(Fraction(math.comb(c, G) + math.comb(n - c, G), math.comb(n, G)))


def degeneracy_summary(rewards: Tensor, atol: float = 1e-6) -> dict[str, float]:
    """Observed degeneracy of one step against the pooled i.i.d. prediction.

    Args:
        rewards: ``[P, G]`` binary rewards, NaN = unscorable.
        atol: tolerance of :func:`degenerate_groups`.

    Returns:
        A dict with the keys of :data:`SUMMARY_KEYS`: fractions of groups that are degenerate, all
        correct and all wrong; the pooled success rate (mean of all scorable rewards); the i.i.d.
        prediction ``f(pooled rate)`` with ``G = rewards.shape[1]``; and the excess observed minus
        predicted (``>= 0`` in expectation by Jensen). NaN where nothing is scorable.
    """
    masks = degenerate_groups(rewards, atol)
    scorable = rewards[~torch.isnan(rewards)].double()
    rate = scorable.mean().item() if scorable.numel() else math.nan
    observed = masks["degenerate"].double().mean().item() if rewards.shape[0] else math.nan
    predicted = iid_degeneracy(rate, rewards.shape[1])
    return {
        "degenerate_frac": observed,
        "all_correct_frac": masks["all_correct"].double().mean().item() if rewards.shape[0] else math.nan,
        "all_wrong_frac": masks["all_wrong"].double().mean().item() if rewards.shape[0] else math.nan,
        "pooled_success_rate": rate,
        "degenerate_iid_pred": predicted,
        "degenerate_excess": observed - predicted,
    }


def starved_fraction(advantages: Tensor, mask: Tensor | None = None) -> float:
    """Share of completions whose advantage is exactly 0.

    Args:
        advantages: ``[P, G]`` (any shape works).
        mask: optional bool tensor of the same shape; only ``True`` entries are counted (e.g. the
            scorable completions). NaN when nothing is counted.
    """
    zero = advantages == 0
    if mask is not None:
        require(mask.shape == advantages.shape,
                f"mask shape {tuple(mask.shape)} must equal advantages shape {tuple(advantages.shape)}")
        zero = zero[mask.bool()]
    return zero.double().mean().item() if zero.numel() else math.nan


def per_prompt_iid_degeneracy(p_tilde: Tensor, G: int) -> float:
    """Per-prompt i.i.d. prediction ``mean_x f(p_x)`` from independent estimates ``p_tilde [P]``.

    NaN entries (prompts without an estimate) are ignored; NaN when none has one. Note that ``f`` of
    a noisy estimate is biased upwards; with raw counts prefer :func:`unbiased_iid_degeneracy`.
    """
    f = iid_degeneracy(p_tilde.double(), G)  # [P]
    return torch.nanmean(f).item() if f.numel() else math.nan


class EMASuccessTracker:
    """Exponential moving average of each prompt's pass rate over its earlier visits.

    The state is a plain dict ``prompt id -> EMA pass rate``; the first visit sets the value.
    """

    def __init__(self, decay: float = 0.9) -> None:
        """
        Args:
            decay: weight of the previous estimate, ``ema = decay * ema + (1 - decay) * rate``; in
                ``[0, 1)`` (0 keeps only the latest visit).
        """
        require(0 <= decay < 1, f"decay must lie in [0, 1), got {decay}; e.g. decay=0.9")
        self.decay = decay
        self.ema: dict[str, float] = {}

    def update(self, ids: Sequence[str], rates: Tensor | Sequence[float]) -> None:
        """Fold in one visit: ``ids [P]`` with observed pass rates ``rates [P]`` (NaN rates are skipped)."""
        values = rates.tolist() if isinstance(rates, Tensor) else list(rates)
        require(
            len(values) == len(ids),
            f"ids and rates must have the same length, got {len(ids)} and {len(values)}",
        )
        for key, rate in zip(ids, values, strict=True):
            if math.isnan(rate):
                continue
            old = self.ema.get(key)
            self.ema[key] = rate if old is None else self.decay * old + (1 - self.decay) * rate

    def get(self, ids: Sequence[str]) -> Tensor:
        """``[P]`` float64 EMA pass rates of ``ids``, NaN for prompts never seen."""
        return torch.tensor([self.ema.get(key, math.nan) for key in ids], dtype=torch.float64)

    def __len__(self) -> int:
        return len(self.ema)

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "ema": dict(self.ema)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.decay = float(state["decay"])
        self.ema = {str(k): float(v) for k, v in state["ema"].items()}
