"""TextSimilarity against values worked out by hand (SQuAD token F1 and ROUGE-L F1)."""

import math

import pytest

from lit_grpo.rewards import TextSimilarity
from lit_grpo.rewards.similarity import rouge_l_f1, token_f1

# (completion, reference, token F1, ROUGE-L F1), worked out by hand:
CASES = [
    # SQuAD drops articles: {cat, sat, on, mat} both, F1 = 1. ROUGE-L keeps them: 6 tokens each,
    # LCS "cat sat on mat" = 4, P = R = 4/6, F = 2/3.
    ("a cat sat on a mat", "the cat sat on the mat", 1.0, 2 / 3),
    # SQuAD: {quick, fox, jumps} vs {quick, brown, fox}: 2 common, P = R = 2/3, F1 = 2/3.
    # ROUGE-L: [quick fox jumps] vs [the quick brown fox]: LCS 2, P = 2/3, R = 2/4, F = 4/7.
    ("quick fox jumps", "The quick brown fox", 2 / 3, 4 / 7),
    # punctuation and case are normalised away by both
    ("Hello, World!", "hello world", 1.0, 1.0),
    # ROUGE-L order matters, SQuAD bags do not: [b a] vs [a b]: LCS 1, P = R = 1/2
    ("beta alpha", "alpha beta", 1.0, 0.5),
    ("", "some words", 0.0, 0.0),
    ("nothing shared", "some words", 0.0, 0.0),
]


@pytest.mark.parametrize(("completion", "reference", "f1", "rouge"), CASES)
def test_components_match_hand_computed_values(completion, reference, f1, rouge):
    assert token_f1(completion, reference) == pytest.approx(f1, abs=1e-6)
    assert rouge_l_f1(completion, reference) == pytest.approx(rouge, abs=1e-6)


def test_reward_is_0_6_f1_plus_0_4_rouge_with_terms():
    out = TextSimilarity()([c for c, *_ in CASES], [r for _, r, *_ in CASES])
    expected = [0.6 * f1 + 0.4 * rouge for *_, f1, rouge in CASES]
    assert out.scores.tolist() == pytest.approx(expected, abs=1e-6)
    assert out.scores[0].item() == pytest.approx(0.6 + 0.4 * 2 / 3, abs=1e-6)  # 0.866667
    assert out.scores[1].item() == pytest.approx(0.4 + 0.4 * 4 / 7, abs=1e-6)  # 0.628571
    assert out.terms["token_f1"].tolist() == pytest.approx([f1 for *_, f1, _ in CASES], abs=1e-6)
    assert out.terms["rouge_l"].tolist() == pytest.approx([r for *_, r in CASES], abs=1e-6)


def test_weights_and_answer_tag():
    reward = TextSimilarity(f1_weight=1.0, rouge_weight=0.0)
    assert reward(["quick fox jumps"], ["The quick brown fox"]).scores.item() == pytest.approx(2 / 3)
    tagged = "<think>The quick brown fox?</think> <answer>quick fox jumps</answer>"
    assert reward([tagged], ["The quick brown fox"]).scores.item() == pytest.approx(2 / 3)


def test_empty_reference_is_unscorable():
    out = TextSimilarity()(["words", "words"], ["  ", None])
    assert all(math.isnan(v) for v in out.scores.tolist())
    assert out.counters["unscorable"] == 2 and math.isnan(out.terms["token_f1"][0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"f1_weight": -1.0}, "f1_weight=-1.0"), ({"f1_weight": 0.0, "rouge_weight": 0.0}, "both 0")],
)
def test_bad_weights(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TextSimilarity(**kwargs)
