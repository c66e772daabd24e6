"""OPO: the length-weighted optimal baseline."""

from __future__ import annotations

from torch import Tensor

from lit_grpo.checks import require
from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import opo_advantages


class OPO(AdvantageEstimator):
    """On-Policy RL with Optimal reward baseline (Hao et al., arXiv 2505.23585): ``A_i = r_i - b`` with the
    length-weighted baseline ``b = sum_j l_j r_j / sum_j l_j`` over the group's scorable completions, ``l``
    their lengths in tokens.

    The baseline that minimises the variance of the sequence-level gradient when each completion's gradient
    norm grows with its length. Equal lengths give DrGRPO; constant groups give exactly 0. Needs the lengths
    the training step passes (``lengths [P, G]``); calling it without them is an error.
    """

    #: The baseline weighs each completion by its length.
    needs_lengths: bool = True

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        require(
            lengths is not None,
            "OPO needs the completion lengths: call it as estimator(rewards, lengths=lengths) with lengths "
            "[P, G] in tokens (GRPOModule's training step passes them)",
        )
        return opo_advantages(rewards, lengths)
