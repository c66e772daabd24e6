"""GRPO: group-normalised advantages."""

from __future__ import annotations

from typing import get_args

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import (
    ScaleKind,
    StdKind,
    check_choice,
    check_positive,
    grpo_advantages,
    sum_over_ranks,
)


class GRPO(AdvantageEstimator):
    """Group-normalised advantage ``A_i = (r_i - mu) / (sd + eps)``.

    ``mu`` and ``sd`` are the mean and standard deviation of the group's scorable rewards (Shao et
    al., DeepSeekMath, arXiv 2402.03300). Constant groups, and groups with fewer than two scorable
    rewards, give exactly 0. With ``std="sample"`` and ``scale="group"`` the std of a single
    completion is undefined, so ``min_group_size`` is 2; otherwise it is 1.

    Args:
        std: ``"sample"`` (unbiased, divides by G - 1, as TRL and verl) or ``"population"``.
        eps: Added to the std before dividing; must be > 0.
        scale: ``"group"`` divides by each group's std, ``"batch"`` by the std of all scorable
            rewards of the batch (the global batch of all data-parallel ranks, as TRL's
            ``scale_rewards="batch"``; every rank must then call the estimator at the same step),
            ``"none"`` only centres (the same as DrGRPO).
    """

    def __init__(self, std: StdKind = "sample", eps: float = 1e-6, scale: ScaleKind = "group") -> None:
        check_choice("GRPO std", std, get_args(StdKind))
        check_positive("GRPO eps", eps, "1e-6")
        check_choice("GRPO scale", scale, get_args(ScaleKind))
        self.std = std
        self.eps = eps
        self.scale = scale

    @property
    def min_group_size(self) -> int:  # type: ignore[override]
        return 2 if (self.std == "sample" and self.scale == "group") else 1

    @property
    def couples_groups(self) -> bool:  # type: ignore[override]
        """Whether an advantage depends on other groups of the batch (``scale="batch"``)."""
        return self.scale == "batch"

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return grpo_advantages(rewards, std=self.std, eps=self.eps, scale=self.scale, reduce=sum_over_ranks)
