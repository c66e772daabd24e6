"""RLOO: leave-one-out baseline."""

from __future__ import annotations

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import rloo_advantages


class RLOO(AdvantageEstimator):
    """Leave-one-out advantage ``A_i = r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mu)``.

    Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning from
    Human Feedback in LLMs" (arXiv 2402.14740). ``G`` counts the scorable rewards of the group; a
    group with fewer than two of them gives 0 (G = 1 is allowed and yields no signal).
    """

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return rloo_advantages(rewards)
