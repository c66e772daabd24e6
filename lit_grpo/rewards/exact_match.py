"""Exact string match against the reference, for tasks with one canonical answer string."""

from __future__ import annotations

from typing import Any

from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.scoring import Unscorable, score_items
from lit_grpo.types import RewardOutput


class ExactMatch(RewardFunction):
    """1.0 when the completion equals the reference, else 0.0.

    Built for answers such as the synthetic arithmetic task's (prompt ``"12+30="``, completion
    ``"42"`` then EOS, decoded without special tokens). A missing or empty reference scores NaN and
    is counted as ``unscorable``.

    Args:
        strip: Strip surrounding whitespace from the completion and the reference before comparing.
        case_sensitive: Compare case-sensitively; when False both sides are case-folded.
        stop_at_newline: Compare only the completion's first line (the answer), ignoring what the
            model wrote after it.
    """

    binary = True

    def __init__(self, strip: bool = True, case_sensitive: bool = True, stop_at_newline: bool = True) -> None:
        self.strip = strip
        self.case_sensitive = case_sensitive
        self.stop_at_newline = stop_at_newline

    def _normalize(self, text: str) -> str:
        if self.strip:
            text = text.strip()
        return text if self.case_sensitive else text.casefold()

    def _score(self, completion: str, reference: str | None) -> float:
        if reference is None or not self._normalize(reference):
            raise Unscorable("unscorable", "empty reference")
        if self.stop_at_newline:
            completion = completion.split("\n", 1)[0]
        return float(self._normalize(completion) == self._normalize(reference))

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` -> scores ``[N]`` in {0, 1}, NaN for no reference."""
        return score_items(self._score, completions, references, name=self.name)
