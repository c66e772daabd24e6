import logging
import math

import pytest
import torch
from math_verify.errors import TimeoutException

from lit_grpo.rewards import STANDARD_COUNTERS, Counted, Unscorable, score_items


def _nan_mask(scores):
    return torch.isnan(scores).tolist()


def test_one_raising_item_gives_nan_for_that_item_only(caplog):
    def fn(completion, reference):
        if completion == "boom":
            raise RuntimeError("scorer exploded")
        return float(completion == reference)

    with caplog.at_level(logging.WARNING):
        out = score_items(fn, ["a", "boom", "b"], ["a", "x", "c"], name="raising-one")
    assert _nan_mask(out.scores) == [False, True, False]
    assert out.scores[0] == 1.0 and out.scores[2] == 0.0
    assert out.counters == {"errors": 1, "timeouts": 0, "unscorable": 0}
    assert "scorer exploded" in caplog.text and "raising-one" in caplog.text


def test_first_error_is_logged_once_per_reward(caplog):
    def fn(completion, reference):
        raise ValueError(f"bad {completion}")

    with caplog.at_level(logging.WARNING):
        first = score_items(fn, ["1", "2"], ["r", "r"], name="raising-always")
        second = score_items(fn, ["3"], ["r"], name="raising-always")
    assert first.counters["errors"] == 2 and second.counters["errors"] == 1
    assert len(caplog.records) == 1
    assert "bad 1" in caplog.text and "bad 2" not in caplog.text


def test_infinite_score_becomes_nan_counted_as_error_with_warning(caplog):
    with caplog.at_level(logging.WARNING):
        out = score_items(lambda c, r: float(c), ["inf", "-inf", "0.5"], ["", "", ""], name="infinite-one")
    assert _nan_mask(out.scores) == [True, True, False]
    assert out.scores[2] == 0.5
    assert out.counters["errors"] == 2
    assert "infinite-one" in caplog.text and "non-finite" in caplog.text


def test_returned_nan_counts_as_unscorable():
    out = score_items(lambda c, r: math.nan, ["a"], ["b"], name="nan-one")
    assert _nan_mask(out.scores) == [True]
    assert out.counters == {"errors": 0, "timeouts": 0, "unscorable": 1}


def test_non_numeric_return_is_an_error():
    out = score_items(lambda c, r: "yes", ["a"], ["b"], name="non-numeric")
    assert _nan_mask(out.scores) == [True] and out.counters["errors"] == 1


@pytest.mark.parametrize("exc", [TimeoutError("slow"), TimeoutException("slow")])
def test_timeouts_are_counted_separately(exc):
    def fn(completion, reference):
        if completion == "slow":
            raise exc
        return 1.0

    out = score_items(fn, ["slow", "fast"], ["r", "r"], name=f"timeout-{type(exc).__name__}")
    assert _nan_mask(out.scores) == [True, False]
    assert out.counters == {"errors": 0, "timeouts": 1, "unscorable": 0}


def test_keyboard_interrupt_propagates():
    def fn(completion, reference):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        score_items(fn, ["a"], ["b"], name="interrupted")


def test_unscorable_and_counted_outcomes():
    def fn(completion, reference):
        if reference is None:
            raise Unscorable("unscorable", "no reference")
        if not completion:
            return Counted(0.0, "no_answer")
        return 1.0

    out = score_items(
        fn, ["x", "", "y"], [None, "r", "r"], name="counted", counter_keys=("no_answer", "other")
    )
    assert _nan_mask(out.scores) == [True, False, False]
    assert out.scores[1:].tolist() == [0.0, 1.0]
    assert out.counters == {"errors": 0, "timeouts": 0, "unscorable": 1, "no_answer": 1, "other": 0}
    assert out.terms == {"counted": out.scores}


def test_columns_are_passed_per_item():
    def fn(completion, reference, weight):
        return weight * float(completion == reference)

    out = score_items(fn, ["a", "a"], ["a", "a"], name="columns", columns={"weight": [2.0, 3.0]})
    assert out.scores.tolist() == [2.0, 3.0]


def test_length_mismatches_name_both_numbers():
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        score_items(lambda c, r: 1.0, ["a", "b"], ["a"], name="lengths")
    with pytest.raises(ValueError, match="column 'w' has 1 values but there are 2 completions"):
        score_items(lambda c, r, w: 1.0, ["a", "b"], ["a", "b"], name="lengths", columns={"w": [1]})


def test_empty_input():
    out = score_items(lambda c, r: 1.0, [], [], name="empty")
    assert out.scores.shape == (0,) and out.scores.dtype == torch.float32
    assert set(STANDARD_COUNTERS) <= out.counters.keys()
