"""Dr. GRPO: group-centred advantages without std division."""

from __future__ import annotations

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import drgrpo_advantages


class DrGRPO(AdvantageEstimator):
    """Group-centred advantage ``A_i = r_i - mu``, with no division by the std.

    Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective" (Dr. GRPO, arXiv
    2503.20783). Pairs with the ``seq-sum-constant`` loss aggregation. Constant groups give exactly 0.
    """

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return drgrpo_advantages(rewards)
