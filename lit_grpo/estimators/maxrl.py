"""MaxRL: advantages normalised by the group's success rate."""

from __future__ import annotations

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import check_positive, maxrl_advantages


class MaxRL(AdvantageEstimator):
    """Success-rate-normalised advantage ``A_i = (r_i - mu) / (mu + eps)``.

    Tajwar et al., MaxRL (arXiv 2602.02710). Gives 0 when ``mu`` is 0 (within a tolerance), for
    constant groups and for a single scorable completion. Rewards are success indicators or rates,
    so a negative reward raises ``ValueError``.

    Args:
        eps: Added to the group mean before dividing; must be > 0.
    """

    def __init__(self, eps: float = 1e-6) -> None:
        check_positive("MaxRL eps", eps, "1e-6")
        self.eps = eps

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return maxrl_advantages(rewards, eps=self.eps)
