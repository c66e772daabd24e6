import math

import pytest

from lit_grpo.rewards import ChoiceLetter
from lit_grpo.rewards.choice import choice_answer


@pytest.mark.parametrize(
    ("completion", "letter"),
    [
        ("C", "C"), (" B", "B"), ("(D)", "D"), ("A) 21", "A"), ("e. because", None),
        ("The answer is C.", "C"), ("Answer: (B)", "B"), ("so the correct option is d", None),
        ("I think A is wrong, the answer is D", "D"), ("A cat sat.", None), ("\\boxed{c}", "C"),
        ("<think>maybe A</think> <answer>B</answer>", "B"), ("<answer>(E)</answer>", "E"),
        ("work... #### C", "C"), ("", None), ("42", None),
    ],
)  # fmt: skip
def test_choice_answer(completion, letter):
    assert choice_answer(completion) == letter


def test_scores_and_no_answer_counter():
    out = ChoiceLetter()(["B", "The answer is C", "no idea", "(b)"], ["B", "B", "B", "b"])
    assert out.scores.tolist() == [1.0, 0.0, 0.0, 0.0]  # "(b)": lower-case is not a lone option letter
    assert out.counters == {"errors": 0, "timeouts": 0, "unscorable": 0, "no_answer": 2}


def test_num_choices_column_bounds_the_letters():
    out = ChoiceLetter()(["E", "E", "B"], ["E", "B", "B"], num_choices=[5, 4, 4])
    assert out.scores.tolist() == [1.0, 0.0, 1.0]
    assert out.counters["no_answer"] == 1  # "E" is not an option of a 4-option question
    bad = ChoiceLetter()(["A"], ["E"], num_choices=[4])
    assert math.isnan(bad.scores[0]) and bad.counters["unscorable"] == 1


@pytest.mark.parametrize("reference", [None, "", "AB", "7", "K"])
def test_reference_that_is_not_an_option_letter_is_unscorable(reference):
    out = ChoiceLetter(letters="ABCDE")(["A"], [reference])
    assert math.isnan(out.scores[0]) and out.counters["unscorable"] == 1


def test_other_columns_are_ignored_and_letters_validated():
    assert ChoiceLetter()(["A"], ["A"], level=[3]).scores.tolist() == [1.0]
    with pytest.raises(ValueError, match="letters='abc'"):
        ChoiceLetter(letters="abc")
