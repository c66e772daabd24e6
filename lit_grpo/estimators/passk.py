"""PassAtK: advantages whose expected update climbs pass@k instead of pass@1."""

from __future__ import annotations

from typing import get_args

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import (
    PassAtKVariant,
    check_choice,
    check_count,
    pass_at_k_advantages,
)


class PassAtK(AdvantageEstimator):
    """Pass@k-objective advantage for binary rewards, from the n scorable completions of a group.

    A completion is correct when ``r >= 0.5`` (scalar rewards are thresholded); ``c`` of the ``n``
    are correct. ``variant="unbiased"`` is PKPO's ``s^(loo-1)`` transformation (Walder & Karkhanis,
    "Pass@K Policy Optimization", arXiv 2505.15201), scaled by ``n``: a correct completion gets
    ``k * C(n-c, k-1) / C(n-1, k-1)`` (the share of k-subsets in which it is the only correct one,
    times n), a wrong one 0. Its expected update is the gradient of pass@k, unbiased for any k <= n:
    ``omega(p) = k (1 - p)^(k-1)``. k = 1 is REINFORCE on the binarised rewards (all-correct groups
    then get +1). ``variant="normalized"`` is the analytic advantage of Chen et al., Pass@k Training
    (arXiv 2508.10751): GRPO over all k-subsets (subset reward = its max), averaged per completion;
    it sums to 0 over the group, gives 0 when every or no k-subset passes, and at k = 1 equals GRPO
    with the population std. A group with fewer than k scorable completions gives 0;
    ``min_group_size`` is k.

    Args:
        k: Samples per attempt in the pass@k objective, 1 <= k <= group_size.
        variant: ``"unbiased"`` (PKPO) or ``"normalized"`` (Pass@k Training).
    """

    def __init__(self, k: int = 4, variant: PassAtKVariant = "unbiased") -> None:
        check_count("PassAtK k", k, 1, "4 (at most group_size)")
        check_choice("PassAtK variant", variant, get_args(PassAtKVariant))
        self.k = k
        self.variant = variant

    @property
    def min_group_size(self) -> int:  # type: ignore[override]
        return self.k

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return pass_at_k_advantages(rewards, k=self.k, variant=self.variant)
