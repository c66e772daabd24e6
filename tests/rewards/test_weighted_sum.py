import math

import pytest
import torch

from lit_grpo.rewards import ExactMatch, RewardFunction, WeightedSum
from lit_grpo.types import RewardOutput


class Constant(RewardFunction):
    """Scores every completion with fixed values; terms and counters for checking the merge."""

    def __init__(self, values, name="Constant"):
        self.values = values
        self._name = name

    @property
    def name(self):
        return self._name

    def __call__(self, completions, references, **columns):
        scores = torch.tensor(self.values, dtype=torch.float32)
        return RewardOutput(
            scores=scores,
            terms={self._name: scores, "length": torch.ones(len(completions))},
            counters={"unscorable": int(torch.isnan(scores).sum()), "custom": 2},
        )


def test_weighted_values():
    reward = WeightedSum([Constant([1.0, 0.0], "a"), Constant([0.5, 1.0], "b")], weights=[2.0, -1.0])
    out = reward(["x", "y"], ["r", "r"])
    assert out.scores.tolist() == [1.5, -1.0]
    assert out.scores.dtype == torch.float32
    assert out.terms["WeightedSum"].tolist() == [1.5, -1.0]
    assert out.terms["a"].tolist() == [1.0, 0.0] and out.terms["b"].tolist() == [0.5, 1.0]
    assert out.terms["a/length"].tolist() == [1.0, 1.0]
    assert "a/a" not in out.terms
    assert out.counters == {"errors": 0, "timeouts": 0, "unscorable": 0, "custom": 4}


def test_default_weights_are_one():
    out = WeightedSum([ExactMatch(), Constant([0.25, 0.25])])(["1", "2"], ["1", "1"])
    assert out.scores.tolist() == [1.25, 0.25]


def test_nan_in_any_component_gives_nan_even_with_zero_weight():
    reward = WeightedSum(
        [Constant([1.0, math.nan, 1.0], "a"), Constant([math.nan, 0.0, 1.0], "b")], [1.0, 0.0]
    )
    out = reward(["x"] * 3, ["r"] * 3)
    assert torch.isnan(out.scores).tolist() == [True, True, False]
    assert out.scores[2] == 1.0
    assert out.counters["unscorable"] == 2


def test_duplicate_names_get_suffixes():
    reward = WeightedSum([ExactMatch(), ExactMatch(case_sensitive=False), Constant([1.0])])
    out = reward(["Yes"], ["yes"])
    assert reward.component_names == ["ExactMatch_1", "ExactMatch_2", "Constant"]
    assert out.terms["ExactMatch_1"].tolist() == [0.0] and out.terms["ExactMatch_2"].tolist() == [1.0]
    assert out.scores.tolist() == [2.0]


def test_nested_sum_does_not_clash_with_own_name():
    inner = WeightedSum([Constant([1.0], "a")])
    out = WeightedSum([inner, Constant([2.0], "b")])(["x"], ["r"])
    assert set(out.terms) >= {"WeightedSum", "WeightedSum_1", "WeightedSum_1/a", "b"}
    assert out.scores.tolist() == [3.0]


def test_length_validation_names_both_numbers():
    with pytest.raises(ValueError, match="3 rewards but 2 weights"):
        WeightedSum([ExactMatch()] * 3, weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="rewards=\\[\\]"):
        WeightedSum([])
    with pytest.raises(ValueError, match="weights="):
        WeightedSum([ExactMatch()], weights=[math.inf])
    with pytest.raises(TypeError, match="must be a RewardFunction"):
        WeightedSum([lambda c, r: 1.0])


def test_component_with_wrong_shape_is_reported():
    reward = WeightedSum([Constant([1.0, 1.0], "short")])
    with pytest.raises(ValueError, match="'short' returned scores of shape \\(2,\\) for 3 completions"):
        reward(["x"] * 3, ["r"] * 3)


class Raising(RewardFunction):
    def __call__(self, completions, references, **columns):
        raise RuntimeError("the reward service is down")


def test_a_component_that_raises_is_nan_and_counted_not_fatal(caplog):
    out = WeightedSum([ExactMatch(), Raising()])(["1", "2"], ["1", "1"])
    assert torch.isnan(out.scores).all()
    assert out.terms["ExactMatch"].tolist() == [1.0, 0.0]
    assert out.counters["errors"] == 2
    assert "the reward service is down" in caplog.text
