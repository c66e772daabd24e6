import pytest

from lit_grpo.rewards import Format


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>add them</think> <answer>42</answer>", 1.0),
        ("<think>line 1\nline 2</think>\n<answer>42</answer>\n", 1.0),
        ("<answer>42</answer>", 0.0),
        ("<think>add</think>", 0.0),
        ("<think>a</think> <answer>42</answer> and more", 0.0),
        ("42", 0.0),
    ],
)
def test_think_answer_shape(completion, expected):
    assert Format()([completion], [None]).scores.tolist() == [expected]


def test_custom_pattern_and_search():
    assert Format(pattern=r"#### \d+", full_match=False)(["so #### 7 ok", "7"], ["", ""]).scores.tolist() == [
        1.0,
        0.0,
    ]
    with pytest.raises(ValueError, match="pattern='\\(' is not a valid regular expression"):
        Format(pattern="(")
