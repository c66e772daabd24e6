"""WordProblems and the question format of SyntheticArithmetic."""

import pytest

from lit_grpo import SyntheticArithmetic, WordProblems
from lit_grpo.rewards.last_number import last_number


def test_word_problems_have_their_answer_and_disjoint_splits():
    source = WordProblems(num_train=300, num_val=50, num_test=50, max_number=20, style="plain", seed=1)
    splits = {s: source.load(s) for s in ("train", "val", "test")}
    assert [len(v) for v in splits.values()] == [300, 50, 50]
    texts = {s: {r["prompt"] for r in v} for s, v in splits.items()}
    assert not texts["val"] & texts["test"]
    for record in splits["val"]:
        a, b = (int(x) for x in [n for n in record["prompt"].split() if n.isdigit()][:2])
        answer = int(record["reference"])
        assert answer >= 0 and answer in (a + b, a - b)
        assert last_number(record["prompt"]) is not None
    assert source.load("val") == splits["val"]  # deterministic


def test_word_problems_kinds_and_sizes_are_validated():
    with pytest.raises(ValueError, match="kinds='mul'"):
        WordProblems(kinds="mul")
    with pytest.raises(ValueError, match="exceeds the .* distinct problems"):
        WordProblems(num_train=10_000, kinds="compare", max_number=10)
    only_add = WordProblems(num_train=0, num_val=20, num_test=0, kinds="add", style="plain")
    assert all(int(r["reference"]) > max(int(n) for n in r["prompt"].split() if n.isdigit())
               for r in only_add.load("val"))


def test_arithmetic_question_format():
    source = SyntheticArithmetic(num_train=0, num_val=3, num_test=0, max_operand=30, question="What is {a} {op} {b}?",
                                 instruction="Answer with the number only.")
    record = source.load("val")[0]
    a, b = int(record["prompt"].split()[2]), int(record["prompt"].split()[4].rstrip("?"))
    assert record["prompt"] == f"What is {a} + {b}?\nAnswer with the number only." and record["reference"] == str(a + b)
    default = SyntheticArithmetic(num_train=0, num_val=3, num_test=0, max_operand=30)
    assert default.load("val")[0]["prompt"] == f"{a}+{b}="  # the same problems, the old format
    with pytest.raises(ValueError, match="question='What is {x}'"):
        SyntheticArithmetic(question="What is {x}")
