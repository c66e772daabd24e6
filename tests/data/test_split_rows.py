"""The rows of each split are pinned: published experiments name their val and test problems by these splits, so a
change to how val, test and train are cut (val first, test next, train the rest) or drawn fails here."""

from __future__ import annotations

import hashlib
import json

import pytest

from lit_grpo import SyntheticArithmetic, WordProblems
from lit_grpo.data import SyntheticChoice
from lit_grpo.data.reasoning_gym import ReasoningGymSource
from lit_grpo.data.synthetic import SyntheticResidue


def digest(source) -> str:
    splits = {s: source.load(s) for s in ("val", "test", "train")}
    return hashlib.sha256(json.dumps(splits, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    "source, expected",
    [
        (SyntheticArithmetic(num_train=6, num_val=3, num_test=2, max_operand=9, operators="+-", seed=3, style="plain"),
         "cdc5eac4f3021c61"),
        (SyntheticArithmetic(), "80741d47bc130f48"),
        (SyntheticResidue(num_train=50, num_val=10, num_test=10), "25e4dfb515d1e795"),
        (SyntheticChoice(num_train=40, num_val=10, num_test=10), "e1837f6e96378504"),
        (WordProblems(num_train=6, num_val=3, num_test=2, style="plain", seed=1), "08973f8700cde69b"),
        (WordProblems(style="plain"), "96d5a9c3836451ac"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else "",
)
def test_generated_splits_are_unchanged(source, expected):
    assert digest(source) == expected


def test_arithmetic_and_word_problem_rows_are_unchanged():
    source = SyntheticArithmetic(num_train=6, num_val=3, num_test=2, max_operand=9, operators="+-", seed=3,
                                 style="plain")
    assert {s: [r["prompt"] for r in source.load(s)] for s in ("val", "test", "train")} == {
        "val": ["8-6=", "8+6=", "7+5="],
        "test": ["3+5=", "6+0="],
        "train": ["8+0=", "3-6=", "7-6=", "6+9=", "3+0=", "8-4="],
    }
    words = WordProblems(num_train=3, num_val=2, num_test=1, style="plain", seed=1)
    assert [r["prompt"] for r in words.load("test")] == [
        "Ruby collected 46 marbles on Monday and 30 marbles on Tuesday. How many marbles did Ruby collect?"
    ]


def test_reasoning_gym_indices_are_val_then_test_then_train():
    source = ReasoningGymSource("chain_sum", {}, num_train=7, num_val=4, num_test=3)
    assert [source.indices(s) for s in ("val", "test", "train")] == [range(0, 4), range(4, 7), range(7, 14)]
