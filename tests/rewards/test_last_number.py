"""LastNumber: the last number of a prose answer, compared by math-verify."""

import math

import pytest

from lit_grpo.rewards import LastNumber
from lit_grpo.rewards.last_number import last_number


@pytest.mark.parametrize(
    ("text", "number"),
    [("The answer is 122.", "122"), ("59 + 63 = 122", "122"), ("1,234 apples", "1234"), ("-7 degrees", "-7"),
     ("3.5 then 2.25", "2.25"), ("no digits here", None), ("5, 6, 7", "7"), ("", None)],
)
def test_last_number(text, number):
    assert last_number(text) == number


def test_scores_the_last_number_only():
    out = LastNumber()(
        ["The answer is 122.", "59 + 63 = 315", "I cannot say.", "It is 42.0", "-3", "12 + 30 = 42, not 41"],
        ["122", "122", "5", "42", "-3", "42"],
    )
    assert out.scores.tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert out.counters["no_answer"] == 1


def test_a_reference_without_an_answer_is_unscorable():
    out = LastNumber()(["42", "42"], ["", "no number"])
    assert all(math.isnan(s) for s in out.scores.tolist()) and out.counters["unscorable"] == 2


def test_timeout_is_validated():
    with pytest.raises(ValueError, match="timeout_s=0"):
        LastNumber(timeout_s=0)
