"""GPG: group-mean baseline with a batch-level correction for degenerate groups."""

from __future__ import annotations

from typing import get_args

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import (
    GPGNorm,
    check_choice,
    check_positive,
    gpg_advantages,
    sum_over_ranks,
)


class GPG(AdvantageEstimator):
    """Group Policy Gradient: ``A_i = alpha * (r_i - mu) / F`` with ``alpha = B / (B - M)``.

    Chu et al., "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning" (arXiv
    2504.02546). ``mu`` is the group mean; ``B`` counts the scorable completions of the whole batch
    (the global batch of all data-parallel ranks) and ``M`` those in constant groups, whose advantage
    is 0: alpha rescales the update as if it were averaged over the informative completions only
    (the paper's accurate gradient estimation). With ``filter_degenerate`` no group is constant, so
    alpha is 1 and GPG is DrGRPO. Constant groups give exactly 0; a single scorable completion is a
    constant group, so ``min_group_size`` is 2. Pair it with the paper's plain policy-gradient loss
    (``num_iterations=1``: the clipped ratio is then 1). Under data parallelism every rank must call
    the estimator at the same step (the training step does).

    Args:
        normalize: ``"none"`` (F = 1, the paper's default) or ``"std"`` (F = the group's sample std
            + eps).
        eps: Added to the group std when ``normalize="std"``; must be > 0.
    """

    #: Groups of one are constant: G = 1 would train on nothing.
    min_group_size: int = 2
    #: alpha couples the groups of a batch.
    couples_groups: bool = True

    def __init__(self, normalize: GPGNorm = "none", eps: float = 1e-6) -> None:
        check_choice("GPG normalize", normalize, get_args(GPGNorm))
        check_positive("GPG eps", eps, "1e-6")
        self.normalize = normalize
        self.eps = eps

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return gpg_advantages(rewards, normalize=self.normalize, eps=self.eps, reduce=sum_over_ranks)
