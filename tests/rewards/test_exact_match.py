import math

import pytest

from lit_grpo.rewards import ExactMatch


@pytest.mark.parametrize(
    ("kwargs", "completion", "reference", "expected"),
    [
        ({}, "42", "42", 1.0),
        ({}, " 42 ", "42", 1.0),
        ({}, "42\n12+7=19", "42", 1.0),
        ({}, "41", "42", 0.0),
        ({}, "420", "42", 0.0),
        ({}, "", "42", 0.0),
        ({"stop_at_newline": False}, "42\nmore", "42", 0.0),
        ({"strip": False}, " 42", "42", 0.0),
        ({}, "Paris", "paris", 0.0),
        ({"case_sensitive": False}, "Paris", "paris", 1.0),
    ],
)
def test_exact_match_cases(kwargs, completion, reference, expected):
    out = ExactMatch(**kwargs)([completion], [reference])
    assert out.scores.tolist() == [expected]


@pytest.mark.parametrize("reference", [None, "", "   "])
def test_missing_reference_is_unscorable(reference):
    out = ExactMatch()(["42", "42"], [reference, "42"])
    assert math.isnan(out.scores[0]) and out.scores[1] == 1.0
    assert out.counters == {"errors": 0, "timeouts": 0, "unscorable": 1}


def test_arithmetic_batch_and_term():
    out = ExactMatch()(["5", "7", "12"], ["5", "8", "12"])
    assert out.scores.tolist() == [1.0, 0.0, 1.0]
    assert out.terms["ExactMatch"].tolist() == [1.0, 0.0, 1.0]
