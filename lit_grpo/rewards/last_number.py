"""The last number of a completion, checked against the reference with ``math-verify``."""

from __future__ import annotations

import re
import threading
from typing import Any

from math_verify import verify

from lit_grpo.checks import require
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.mathverify import extract_answer
from lit_grpo.rewards.scoring import Counted, Unscorable, score_items
from lit_grpo.types import RewardOutput

#: A number as models write it in prose: sign, digit groups with commas, decimals ("1,234.5", "-7").
NUMBER = re.compile(r"-?\d(?:[\d,]*\d)?(?:\.\d+)?")


def last_number(text: str) -> str | None:
    """The last number in ``text`` with digit-group commas removed, or None when there is none."""
    found = NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


class LastNumber(RewardFunction):
    """1.0 when the last number in the completion equals the reference's answer, else 0.0.

    For instruction-tuned models that answer in prose ("59 + 63 = 122. The answer is 122."): no answer
    marker is needed, the last number written counts. The reference's last number is the expected
    answer (``"42"``, or a worked solution ending in it). Both are parsed and compared by ``math-verify``
    (so ``"42"`` and ``"42.0"``, ``"-3"`` and ``"-3.00"`` are equal). A completion without any number
    scores 0 and is counted in ``no_answer``; a reference without a number scores NaN (``unscorable``).

    Args:
        timeout_s: math-verify's time limit per parse and comparison, in whole seconds (main thread only).
    """

    def __init__(self, timeout_s: int = 5) -> None:
        require(timeout_s >= 1, f"timeout_s={timeout_s} must be >= 1 (whole seconds)")
        self.timeout_s = timeout_s

    def score_item(self, completion: str, reference: str | None, **row: Any) -> float | Counted:
        timeout = self.timeout_s if threading.current_thread() is threading.main_thread() else None
        if reference is None or not str(reference).strip():
            raise Unscorable("unscorable", "empty reference")
        expected = last_number(str(reference))
        if expected is None:
            raise Unscorable("unscorable", f"no number in reference {reference!r}")
        gold = extract_answer(expected, "auto", timeout, bare=True)
        number = last_number(completion)
        if number is None:
            return Counted(0.0, "no_answer")
        answer = extract_answer(number, "auto", timeout, bare=True)
        return float(verify(gold, answer, timeout_seconds=timeout, raise_on_error=True))

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` -> scores ``[N]`` in {0, 1}, NaN where unscorable."""
        return score_items(
            self.score_item, completions, references, name=self.name, counter_keys=("no_answer",)
        )
