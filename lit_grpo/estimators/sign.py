"""Sign: a fixed-reference advantage with no group statistics."""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.functional import check_choice, sign_advantages


class Sign(AdvantageEstimator):
    """Fixed-reference advantage ``A_i = 2 r_i - 1``.

    Nie et al., "Gradient Starvation in Binary-Reward GRPO" (arXiv 2605.07689). Not zero-mean:
    an all-correct group gives +1 per completion and an all-wrong group -1, so no group is starved.
    Rewards in [0, 1] use the same linear formula; unscorable (NaN) rewards give 0.

    Args:
        all_wrong: ``"push"`` (the estimator) gives each completion of an all-wrong group -1;
            ``"zero"`` gives it 0, an ablation that asks whether Sign's effect is the push-down of
            all-wrong groups (everything else unchanged; all-correct groups still get +1).
    """

    def __init__(self, all_wrong: Literal["push", "zero"] = "push") -> None:
        check_choice("Sign all_wrong", all_wrong, ("push", "zero"))
        self.all_wrong = all_wrong

    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        return sign_advantages(rewards, self.all_wrong)
