"""SignBalance: signed advantages balanced between correct and wrong completions."""

from __future__ import annotations

from typing import get_args

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import (
    AllCorrectKind,
    check_choice,
    check_positive,
    sign_balance_advantages,
)


class SignBalance(AdvantageEstimator):
    """Balanced sign advantage: ``+c`` for a correct completion, ``-c * n+ / n-`` for a wrong one.

    Wang et al., "Spurious Advantage Hidden in GRPO" (SignBalance, arXiv 2609.04063). ``n+`` and
    ``n-`` count the group's correct and wrong scorable completions; the ratio is a constant (no
    gradient). A mixed group sums to 0 and equals MaxRL times ``c * n+ / n-``. All-wrong groups
    give 0. Rewards are binarised: ``r >= 0.5`` counts as correct, so scalar rewards in [0, 1] are
    thresholded rather than rejected.

    Args:
        c: Advantage of a correct completion; must be > 0.
        all_correct: ``"zero"`` gives an all-correct group 0, ``"push"`` gives it ``+c`` each.
    """

    def __init__(self, c: float = 1.0, all_correct: AllCorrectKind = "zero") -> None:
        check_positive("SignBalance c", c, "1.0")
        check_choice("SignBalance all_correct", all_correct, get_args(AllCorrectKind))
        self.c = c
        self.all_correct = all_correct

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return sign_balance_advantages(rewards, c=self.c, all_correct=self.all_correct)
