"""REINFORCE++-baseline: group-mean baseline, normalised by the std of the whole batch."""

from __future__ import annotations

from typing import get_args

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import (
    StdKind,
    check_choice,
    check_positive,
    reinforce_pp_advantages,
    sum_over_ranks,
)


class ReinforcePlusPlus(AdvantageEstimator):
    """REINFORCE++-baseline: ``A_i = (r_i - mu) / (sd_B + eps)``.

    Hu et al., REINFORCE++ (arXiv 2501.03262), its variant with a group baseline (verl's
    ``reinforce_plus_plus_baseline``, OpenRLHF's ``reinforce_baseline``). ``mu`` is the mean of the group's
    scorable rewards; ``sd_B`` is the std of the group-centred rewards over every scorable completion of the
    whole batch: the global batch of all data-parallel ranks (the ranks sum the few numbers it needs),
    so a multi-process run divides by the same value as one process on the same batch. The groups of
    a batch are therefore coupled by that one number. Constant groups give exactly 0 and count in
    ``sd_B`` with their zeros; a group with one scorable completion has no baseline and gives 0, so
    ``min_group_size`` is 2. Under data parallelism every rank must call the estimator at the same
    step (the training step does).

    Args:
        std: ``"sample"`` (divides by N - 1, as verl's whitening) or ``"population"`` (as OpenRLHF).
        eps: Added to the batch std before dividing; must be > 0.
    """

    #: One scorable completion has no group baseline: G = 1 would train on nothing.
    min_group_size: int = 2
    #: The batch std couples the groups of a batch.
    couples_groups: bool = True

    def __init__(self, std: StdKind = "sample", eps: float = 1e-6) -> None:
        check_choice("ReinforcePlusPlus std", std, get_args(StdKind))
        check_positive("ReinforcePlusPlus eps", eps, "1e-6")
        self.std = std
        self.eps = eps

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return reinforce_pp_advantages(rewards, std=self.std, eps=self.eps, reduce=sum_over_ranks)
