"""A format reward: whether the completion has the shape the prompt asked for."""

from __future__ import annotations

import re
from typing import Any

from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.scoring import score_items
from lit_grpo.types import RewardOutput

#: Reasoning in ``<think>`` tags, then the answer in ``<answer>`` tags, and nothing else.
THINK_ANSWER = r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*"


class Format(RewardFunction):
    """1.0 when the completion matches ``pattern`` (the whole completion), else 0.0.

    Reference-free: it scores every completion, whatever its reference. The default pattern is the
    shape the ``think`` prompt style asks for: ``<think> ... </think> <answer> ... </answer>``. Usually
    a small term of a :class:`~lit_grpo.rewards.WeightedSum` next to a correctness reward.

    Args:
        pattern: Regular expression (Python ``re`` syntax, ``.`` matching newlines too).
        full_match: The whole completion must match; when False, a match anywhere counts.
    """

    binary = True

    def __init__(self, pattern: str = THINK_ANSWER, full_match: bool = True) -> None:
        try:
            self._regex = re.compile(pattern, re.DOTALL)
        except re.error as e:
            raise ValueError(f"pattern={pattern!r} is not a valid regular expression: {e}") from None
        self.pattern = pattern
        self.full_match = full_match

    def score_item(self, completion: str, reference: Any = None, **row: Any) -> float:
        match = self._regex.fullmatch if self.full_match else self._regex.search
        return float(match(completion) is not None)

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]`` -> scores ``[N]`` in {0, 1}; references are not used."""
        return score_items(self.score_item, completions, references, name=self.name)
