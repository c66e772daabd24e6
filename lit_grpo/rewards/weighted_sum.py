"""A weighted sum of reward functions, e.g. correctness plus a format bonus."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import torch
from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.scoring import STANDARD_COUNTERS, call_reward, check_lengths
from lit_grpo.types import RewardOutput


def unique_names(names: list[str], reserved: tuple[str, ...] = ()) -> list[str]:
    """``names`` with duplicates (and ``reserved`` names) made unique by ``_1``, ``_2``, ... suffixes."""
    duplicated = {name for name in names if names.count(name) > 1 or name in reserved}
    used, out = set(reserved), []
    for name in names:
        candidate, k = name, 0
        while candidate in used or (k == 0 and name in duplicated):
            k += 1
            candidate = f"{name}_{k}"
        used.add(candidate)
        out.append(candidate)
    return out


def weighted_sum(scores: Tensor, weights: Tensor) -> Tensor:
    """``scores [K, N]``, ``weights [K]`` -> ``[N]``; NaN wherever any component is NaN."""
    return (weights[:, None] * scores).sum(0)  # [N]


class WeightedSum(RewardFunction):
    """``score = sum_k w_k * s_k`` over component rewards.

    An item is NaN when any component is NaN for it, whatever that component's weight (0 included):
    a sum with a missing term is not the reward the weights describe, and NaN keeps the item out of
    the group statistics instead of silently scoring it on the remaining terms.

    Terms: the sum under this reward's name, each component's score under its name (duplicates get
    ``_1``, ``_2``, ... suffixes), and each component's own extra terms as ``<component>/<term>``.
    Counters are summed by key over the components. Each component is called through
    :func:`~lit_grpo.rewards.scoring.call_reward`: one that raises as a whole gives NaN for every item,
    counted in ``errors``, and the others still run; one that returns the wrong number of scores is an
    error naming it.

    Args:
        rewards: The component rewards (at least one).
        weights: One weight per reward; all 1.0 when omitted.
    """

    def __init__(self, rewards: list[RewardFunction], weights: list[float] | None = None) -> None:
        require(bool(rewards), "rewards=[] is empty; give at least one reward function to WeightedSum")
        for reward in rewards:
            if not isinstance(reward, RewardFunction):
                raise TypeError(
                    f"rewards contains {reward!r} of type {type(reward).__name__}; "
                    "each entry must be a RewardFunction"
                )
        weights = [1.0] * len(rewards) if weights is None else list(weights)
        require(
            len(weights) == len(rewards),
            f"WeightedSum got {len(rewards)} rewards but {len(weights)} weights; give one weight per reward",
        )
        require(all(math.isfinite(w) for w in weights), f"weights={weights} must all be finite numbers")
        self.rewards = list(rewards)
        self.weights = [float(w) for w in weights]

    @property
    def binary(self) -> bool | None:  # type: ignore[override]
        """Binary when one component has a non-zero weight, 1, and is binary; not binary when several binary
        components (or one with another weight) add up to partial sums such as 0.5 or 2; unknown otherwise."""
        used = [(r, w) for r, w in zip(self.rewards, self.weights, strict=True) if w != 0]
        if len(used) == 1 and used[0][1] == 1.0:
            return used[0][0].binary
        if used and all(r.binary is True for r, _ in used):
            return False
        return None

    @property
    def needs_prompts(self) -> bool:  # type: ignore[override]
        """When a component reads the prompts (each component gets them only if it does)."""
        return any(r.needs_prompts for r in self.rewards)

    @property
    def component_names(self) -> list[str]:
        """The names the components' scores are logged under."""
        return unique_names([r.name for r in self.rewards], reserved=(self.name,))

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` -> the weighted sum ``[N]`` with every term."""
        check_lengths(completions, references, columns)
        outs = [call_reward(r, completions, references, **columns) for r in self.rewards]  # checked
        scores = torch.stack([o.scores.float() for o in outs])  # [K, N]
        total = weighted_sum(scores, torch.tensor(self.weights, dtype=torch.float32))  # [N]
        terms: dict[str, Tensor] = {self.name: total}
        counters: Counter = Counter(dict.fromkeys(STANDARD_COUNTERS, 0))
        for reward, name, out, s in zip(self.rewards, self.component_names, outs, scores, strict=True):
            terms[name] = s
            terms.update({f"{name}/{k}": v for k, v in out.terms.items() if k != reward.name})
            counters.update(out.counters)
        return RewardOutput(scores=total, terms=terms, counters=dict(counters))
