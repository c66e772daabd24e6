import math
import threading
import time

import math_verify.grader
import pytest
from math_verify.errors import TimeoutException

from lit_grpo.rewards import MathVerify
from lit_grpo.rewards import mathverify as module

GSM8K_SOLUTION = "Natalia sold 48/2 = 24 clips in May.\nShe sold 48+24 = 72 clips.\n#### 72"
BOXED_SOLUTION = "Half of the cake is left, so the answer is $\\boxed{\\frac{1}{2}}$."


def scores(reward, completions, references):
    out = reward(completions, references)
    return out.scores.tolist(), out.counters


@pytest.mark.parametrize(
    ("completion", "reference"),
    [
        ("48/2 = 24, 48+24 = 72.\n#### 72", GSM8K_SOLUTION),
        ("#### 72", "72"),
        ("#### $1,000 in total", "1000"),
        ("So it is \\boxed{0.5}.", "\\frac{1}{2}"),
        ("\\boxed{\\dfrac{2}{4}}", BOXED_SOLUTION),
        ("#### 0.5", BOXED_SOLUTION),
        ("\\boxed{\\sqrt{18}}", "3\\sqrt{2}"),
        ("\\boxed{(x+1)^2}", "x^2+2x+1"),
        ("first \\boxed{3}, then corrected: #### 4", "4"),
    ],
)
def test_equivalent_answers_score_one(completion, reference):
    values, counters = scores(MathVerify(), [completion], [reference])
    assert values == [1.0]
    assert counters == {"errors": 0, "timeouts": 0, "unscorable": 0, "no_answer": 0}


@pytest.mark.parametrize(
    ("completion", "reference"),
    [("#### 71", GSM8K_SOLUTION), ("\\boxed{\\frac{1}{3}}", "0.5"), ("\\boxed{x^2+1}", "(x+1)^2")],
)
def test_wrong_answer_scores_zero(completion, reference):
    values, counters = scores(MathVerify(), [completion], [reference])
    assert values == [0.0] and counters["no_answer"] == 0


def test_no_answer_in_completion_is_zero_and_counted():
    values, counters = scores(MathVerify(), ["The answer is 72.", "", "#### ", "#### ???"], ["72"] * 4)
    assert values == [0.0, 0.0, 0.0, 0.0]
    assert counters["no_answer"] == 4 and counters["unscorable"] == 0


def test_format_selects_the_markers():
    completions = ["\\boxed{72}", "#### 72"]
    assert scores(MathVerify(answer_format="gsm8k"), completions, ["72", "72"])[0] == [0.0, 1.0]
    assert scores(MathVerify(answer_format="boxed"), completions, ["72", "72"])[0] == [1.0, 0.0]


@pytest.mark.parametrize("reference", ["", None, "???", "#### ???", "#### ", "\\boxed{"])
def test_unparsable_reference_is_nan_and_counted(reference):
    values, counters = scores(MathVerify(), ["#### 72", "#### 72"], [reference, "72"])
    assert math.isnan(values[0]) and values[1] == 1.0
    assert counters == {"errors": 0, "timeouts": 0, "unscorable": 1, "no_answer": 0}


def test_timeout_gives_nan_and_other_items_still_score(monkeypatch):
    real_verify = module.verify

    def verify(gold, answer, **kwargs):
        if "71" in str(answer):
            raise TimeoutException("Timeout during comparison")
        return real_verify(gold, answer, **kwargs)

    monkeypatch.setattr(module, "verify", verify)
    values, counters = scores(MathVerify(), ["#### 71", "#### 72", "#### 5"], ["72", "72", "72"])
    assert math.isnan(values[0]) and values[1:] == [1.0, 0.0]
    assert counters["timeouts"] == 1 and counters["errors"] == 0


def test_math_verify_alarm_timeout_is_not_swallowed(monkeypatch):
    # A comparison that hangs: math-verify's own SIGALRM timeout must surface as a counted timeout.
    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", lambda *args, **kwargs: time.sleep(30))
    values, counters = scores(MathVerify(timeout_s=0.5), ["#### 72"], ["72"])
    assert math.isnan(values[0]) and counters["timeouts"] == 1


def test_verify_errors_are_nan_and_counted(monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("sympy broke")

    monkeypatch.setattr(math_verify.grader, "sympy_expr_eq", explode)
    values, counters = scores(MathVerify(), ["#### 72", "no answer"], ["72", "72"])
    assert math.isnan(values[0]) and values[1] == 0.0
    assert counters["errors"] == 1 and counters["no_answer"] == 1


def test_timeouts_passed_in_main_thread_and_disabled_elsewhere(monkeypatch):
    seen = []
    real_verify = module.verify

    def verify(gold, answer, **kwargs):
        seen.append(kwargs["timeout_seconds"])
        return real_verify(gold, answer, **kwargs)

    monkeypatch.setattr(module, "verify", verify)
    reward = MathVerify(timeout_s=2.5)
    main = reward(["#### 72"], ["72"])
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=reward(["#### 72", "#### 7"], ["72", "72"])))
    worker.start()
    worker.join()
    assert main.scores.tolist() == [1.0]
    assert result["out"].scores.tolist() == [1.0, 0.0]
    assert result["out"].counters["errors"] == 0
    assert seen == [3, None, None]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"answer_format": "latex"}, "answer_format='latex'"), ({"timeout_s": 0}, "timeout_s=0")],
)
def test_bad_options_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MathVerify(**kwargs)


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        # units, currency, percent and degrees are dropped around the number
        ("\\boxed{5\\text{ cm}}", "5", 1.0),
        ("#### 5 cm", "5", 1.0),
        ("#### $5.00", "5", 1.0),
        ("\\boxed{\\$5}", "5", 1.0),
        ("\\boxed{10\\%}", "10", 1.0),
        ("\\boxed{90^\\circ}", "90", 1.0),
        # LaTeX spellings of the same value
        ("\\boxed{\\frac12}", "0.5", 1.0),
        ("\\boxed{\\tfrac{1}{2}}", "\\frac{1}{2}", 1.0),
        ("\\boxed{\\dfrac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", 1.0),
        ("\\boxed{\\left(1, 2\\right)}", "(1,2)", 1.0),
        ("\\boxed{\\{1,2\\}}", "\\{2,1\\}", 1.0),
        ("\\boxed{1{,}000}", "1000", 1.0),
        ("\\boxed{x=3}", "3", 1.0),
        # close is not equal
        ("\\boxed{[1,2]}", "[1,2)", 0.0),
        ("#### 0.333", "\\frac{1}{3}", 0.0),
    ],
)
def test_units_and_latex_forms(completion, reference, expected):
    values, counters = scores(MathVerify(), [completion], [reference])
    assert values == [expected] and counters["errors"] == counters["no_answer"] == 0


def test_answer_tag_of_the_think_style():
    completions = ["<think>3/4 of it</think> <answer>3/4</answer>", "<answer>\\boxed{0.75}</answer>",
                   "<answer>#### 0.75</answer>", "<think>...</think><answer></answer>"]  # fmt: skip
    values, counters = scores(MathVerify(), completions, ["\\frac{3}{4}"] * 4)
    assert values == [1.0, 1.0, 1.0, 0.0] and counters["no_answer"] == 1
    only_tags = MathVerify(answer_format="tag")
    assert scores(only_tags, ["#### 7", "<answer>7</answer>"], ["7", "7"])[0] == [0.0, 1.0]


@pytest.mark.parametrize("completion", ["\\boxed{", "so \\boxed{5", "#### ", "<answer>"])
def test_unparsable_completion_is_no_answer(completion):
    values, counters = scores(MathVerify(), [completion], ["5"])
    assert values == [0.0] and counters["no_answer"] == 1 and counters["errors"] == 0
