"""Reward shaping by completion length: a step between scoring and the estimator that sees token counts.

A reward function scores texts; shaping by length needs each completion's length in tokens, which the
training step has. ``GRPOModule(shaping=...)`` applies a :class:`RewardShaping` to the rewards ``[P, G]``
before the estimator; the raw rewards stay what the diagnostics and dynamic sampling read.

``max_new_tokens`` below is the most tokens a row can sample (:meth:`RolloutEngine.max_sampled_tokens`):
``sampling.max_new_tokens`` for one completion; for a multi-turn episode, whose length is the sum of its
sampled turns, the episode's budget (``max_turns`` turns of ``max_new_tokens``, at most
``max_episode_tokens``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch
from torch import Tensor

from lit_grpo.checks import require


@dataclass
class ShapedRewards:
    """Shaped rewards ``[P, G]`` (NaN where the reward was unscorable) and the shaping terms ``[P, G]``, each
    logged as ``reward/<name>`` (its mean over scorable completions)."""

    rewards: Tensor
    terms: dict[str, Tensor] = field(default_factory=dict)


class RewardShaping(ABC):
    """Turns the rewards of ``P`` groups and their completion lengths into shaped rewards."""

    @abstractmethod
    def __call__(self, rewards: Tensor, lengths: Tensor, max_new_tokens: int) -> ShapedRewards:
        """``rewards [P, G]`` (NaN = unscorable), ``lengths [P, G]`` generated tokens -> shaped rewards."""

    def check(self, max_new_tokens: int) -> None:
        """Raise ``ValueError`` when the shaping cannot apply to completions of up to ``max_new_tokens``
        tokens; the module calls it when it is built, before the first step. Every length is fine by
        default."""
        return None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def overlong_penalty(lengths: Tensor, max_new_tokens: int, buffer: int, penalty: float = 1.0) -> Tensor:
    """DAPO's soft overlong punishment ``[P, G]``: 0 up to ``max_new_tokens - buffer`` tokens, then falling
    linearly to ``-penalty`` at ``max_new_tokens`` (``-penalty`` beyond, which generation never reaches).

    ``lengths`` count each completion's generated tokens (EOS included), never its padding or prompt.
    """
    require(0 < buffer <= max_new_tokens,
            f"OverlongPenalty: buffer={buffer} must be in 1..max_new_tokens ({max_new_tokens})")
    over = (lengths.double() - (max_new_tokens - buffer)).clamp(min=0.0, max=float(buffer))  # [P, G]
    return (-penalty * over / buffer).float()


class OverlongPenalty(RewardShaping):
    """DAPO's soft overlong punishment (Yu et al., arXiv 2503.14476): adds 0 to a completion's reward up to
    ``max_new_tokens - buffer`` tokens, then a penalty falling linearly to ``-penalty`` over the last
    ``buffer`` tokens, so a completion cut at ``max_new_tokens`` gets ``-penalty`` (METHODS.md section 6).
    Logged as ``reward/overlong_penalty``.

    Args:
        buffer: Length of the punishment interval in tokens (DAPO: 4096 of 20480); at most ``max_new_tokens``.
        penalty: Penalty at ``max_new_tokens`` (DAPO: 1).
    """

    def __init__(self, buffer: int, penalty: float = 1.0) -> None:
        require(buffer >= 1, f"OverlongPenalty: buffer={buffer} must be >= 1 token")
        require(penalty >= 0, f"OverlongPenalty: penalty={penalty} must be >= 0")
        self.buffer, self.penalty = buffer, penalty

    def check(self, max_new_tokens: int) -> None:
        require(
            self.buffer <= max_new_tokens,
            f"OverlongPenalty: buffer={self.buffer} is longer than the completions "
            f"({max_new_tokens} tokens: sampling.max_new_tokens, or an episode's budget, "
            f"EpisodeEngine.max_sampled_tokens); set buffer to at most {max_new_tokens}",
        )

    def __call__(self, rewards: Tensor, lengths: Tensor, max_new_tokens: int) -> ShapedRewards:
        # [P, G]
        term = overlong_penalty(lengths.to(rewards.device), max_new_tokens, self.buffer, self.penalty)
        term = torch.where(rewards.isnan(), torch.nan, term)
        return ShapedRewards(rewards + term, {"overlong_penalty": term})
