"""The advantage-estimator interface."""

from __future__ import annotations

from abc import ABC, abstractmethod

from torch import Tensor


class AdvantageEstimator(ABC):
    """Maps the rewards of ``P`` groups to advantages, one group at a time.

    Subclasses bind hyperparameters only; the maths lives in pure functions. Unscorable rewards
    (NaN) are excluded from group statistics and get advantage 0. The result is detached.
    """

    #: Smallest group size for which the estimator is defined.
    min_group_size: int = 1
    #: Whether an advantage depends on the other groups of the batch (a batch statistic, summed over the
    #: data-parallel ranks): one group then has no advantages of its own, and every rank must call the
    #: estimator at the same step. The diagnostics that estimate one group at a time refuse such an estimator.
    couples_groups: bool = False
    #: Whether the estimator needs the completions' lengths (``lengths [P, G]``): a call without them is an
    #: error.
    needs_lengths: bool = False

    @abstractmethod
    def __call__(self, rewards: Tensor, lengths: Tensor | None = None) -> Tensor:
        """``rewards [P, G]`` (float, NaN = unscorable) -> ``advantages [P, G]`` (float32).

        ``lengths [P, G]``: the completions' lengths in tokens, which the training step always passes; an
        estimator that does not use them ignores them (OPO needs them).
        """

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"
