"""Every reward function honours the RewardFunction contract."""

import pytest
import torch

from lit_grpo.rewards import (
    STANDARD_COUNTERS,
    ChoiceLetter,
    ExactMatch,
    Format,
    LastNumber,
    MathVerify,
    RewardFunction,
    TextSimilarity,
    WeightedSum,
)

REWARDS = {
    "ExactMatch": ExactMatch,
    "MathVerify": MathVerify,
    "ChoiceLetter": ChoiceLetter,
    "TextSimilarity": TextSimilarity,
    "Format": Format,
    "LastNumber": LastNumber,
    "WeightedSum": lambda: WeightedSum([ExactMatch(), MathVerify()], weights=[0.5, 1.0]),
}
REFERENCE_FREE = {"Format"}  # scores the completion alone: a missing reference is no reason for NaN
COMPLETIONS = ["#### 4", "4", "\\boxed{5}", ""]
REFERENCES = ["4", "4", "#### 4", None]


@pytest.fixture(params=list(REWARDS), ids=list(REWARDS))
def reward(request):
    return REWARDS[request.param]()


def test_contract(reward):
    assert isinstance(reward, RewardFunction)
    out = reward(COMPLETIONS, REFERENCES, extra=[1, 2, 3, 4])
    assert out.scores.shape == (len(COMPLETIONS),)
    assert out.scores.dtype == torch.float32
    if reward.name not in REFERENCE_FREE:
        assert torch.isnan(out.scores[3]), "a missing reference must be NaN, never a silent 0"
        assert out.counters["unscorable"] >= 1
    assert set(STANDARD_COUNTERS) <= out.counters.keys()
    assert all(isinstance(v, int) for v in out.counters.values())
    assert reward.name in out.terms
    assert all(t.shape == (len(COMPLETIONS),) for t in out.terms.values())


def test_empty_input_gives_empty_output(reward):
    out = reward([], [])
    assert out.scores.shape == (0,) and out.scores.dtype == torch.float32
    assert set(STANDARD_COUNTERS) <= out.counters.keys()
    assert out.terms[reward.name].shape == (0,)


def test_length_mismatch_is_rejected(reward):
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        reward(["a", "b"], ["a"])


@pytest.mark.parametrize(("reward", "binary"), [
    (ExactMatch(), True), (MathVerify(), True), (ChoiceLetter(), True), (Format(), True), (TextSimilarity(), False),
    (WeightedSum([ExactMatch()]), True),  # one component with weight 1
    (WeightedSum([ChoiceLetter(), Format()], weights=[1.0, 0.0]), True),  # a zero weight drops out
    (WeightedSum([ExactMatch(), Format()]), False),  # sums reach 2
    (WeightedSum([ExactMatch()], weights=[0.5]), False),
    (WeightedSum([TextSimilarity()]), False),
])
def test_rewards_declare_whether_they_are_binary(reward, binary):
    assert reward.binary is binary


def test_a_reward_that_does_not_say_is_of_unknown_binarity():
    class Custom(RewardFunction):
        def __call__(self, completions, references, **columns):
            raise NotImplementedError

    assert Custom().binary is None and WeightedSum([Custom()]).binary is None
    assert WeightedSum([ExactMatch(), Custom()]).binary is None
