"""SoftmaxGRPO: softmax-weighted advantages."""

from __future__ import annotations

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import check_positive, softmax_advantages


class SoftmaxGRPO(AdvantageEstimator):
    """Softmax advantage ``A_i = G * softmax((r - max r) / tau)_i - 1``.

    Hernandez et al., SoftmaxGRPO (arXiv 2608.09271). Sums to 0 over the group; constant groups
    give exactly 0. As ``tau -> 0`` it becomes MaxRL for binary rewards with at least one correct
    completion; as ``tau -> inf``, ``tau * A`` approaches DrGRPO.

    Args:
        tau: Temperature, finite and > 0: 0.1 for binary rewards (GSM8K-style), 0.3 for scalar
            rewards in [0, 1].
    """

    def __init__(self, tau: float = 0.1) -> None:
        check_positive("SoftmaxGRPO tau", tau, "0.1 for binary rewards or 0.3 for rewards in [0, 1]")
        self.tau = tau

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return softmax_advantages(rewards, tau=self.tau)
