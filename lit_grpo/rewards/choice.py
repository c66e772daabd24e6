"""Multiple-choice answers: the option letter in the completion against the reference letter."""

from __future__ import annotations

import re
import string
from typing import Any

from lit_grpo.checks import require
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.scoring import Counted, Unscorable, score_items
from lit_grpo.types import RewardOutput

_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL | re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{\s*\(?([A-Za-z])\)?\s*\}")
_CUE = re.compile(r"(?i:answer|option|choice)\s*(?i:is)?\s*[:\-]?\s*\(?([A-Z])\b\)?")
_LONE = re.compile(r"^\s*\(?([A-Z])\s*(?:[).:\]]|$|\n)")


def choice_answer(text: str) -> str | None:
    """The option letter a completion gives, or None.

    In order: the content of the last ``<answer>`` tag, a ``\\boxed{C}``, ``#### C``, or the whole text
    is searched; there a leading lone letter (``"C"``, ``"(C)"``, ``"C) 22"``) counts, else the last
    cue like ``"answer is C"`` / ``"Answer: (C)"``. Letters are returned upper-case.
    """
    tags = _TAG.findall(text)
    if tags:
        text = tags[-1]
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].upper()
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    lone = _LONE.match(text)
    if lone:
        return lone.group(1).upper()
    cues = _CUE.findall(text)
    return cues[-1].upper() if cues else None


class ChoiceLetter(RewardFunction):
    """1.0 when the completion's option letter is the reference letter, else 0.0.

    The bounded-answer reward: with k options a uniform guess scores 1/k on average. A completion
    without a letter, or with a letter beyond the item's options, scores 0.0 and is counted in
    ``no_answer``; a reference that is not a single letter is NaN (``unscorable``). The number of
    options comes from the column ``num_choices`` when the data has it (the multiple-choice tasks set
    it), else from ``letters``.

    Args:
        letters: The option letters when no ``num_choices`` column is given.
    """

    binary = True

    def __init__(self, letters: str = string.ascii_uppercase[:10]) -> None:
        require(
            bool(letters)
            and set(letters) <= set(string.ascii_uppercase)
            and len(set(letters)) == len(letters),
            f"letters={letters!r} must be distinct upper-case letters, e.g. 'ABCDE'",
        )
        self.letters = letters

    def score_item(self, completion: str, reference: str | None, num_choices: int | None = None, **row: Any):
        valid = self.letters if num_choices is None else string.ascii_uppercase[: int(num_choices)]
        gold = str(reference).strip().strip("()").strip().upper() if reference is not None else ""
        if len(gold) != 1 or gold not in valid:
            raise Unscorable("unscorable", f"reference {reference!r} is not one of the letters {valid}")
        letter = choice_answer(completion)
        if letter is None or letter not in valid:
            return Counted(0.0, "no_answer")
        return float(letter == gold)

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` (letters) -> scores ``[N]`` in {0, 1}."""
        used = {k: v for k, v in columns.items() if k == "num_choices"}
        return score_items(
            self.score_item,
            completions,
            references,
            name=self.name,
            columns=used,
            counter_keys=("no_answer",),
        )
