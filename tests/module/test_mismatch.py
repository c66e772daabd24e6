import math

import pytest
import torch

from lit_grpo.logprobs import logp_mismatch
from lit_grpo.losses.functional import truncated_is_weights

TRAIN = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, 0.0]])
ROLL = torch.tensor([[-1.5, -2.0, -0.5], [-0.1, -1.0, -9.0]])
MASK = torch.tensor([[True, True, False], [True, True, False]])


def test_mismatch_statistics_golden():
    stats = logp_mismatch(TRAIN, ROLL, MASK)
    # |d| over the 4 masked tokens: 0.5, 0, 0, 2 (the padded 9.0 is ignored)
    assert stats["logp_diff_mean"].item() == pytest.approx(0.625)
    assert stats["logp_diff_max"].item() == pytest.approx(2.0)
    k3 = [math.exp(d) - d - 1 for d in (0.5, 0.0, 0.0, -2.0)]  # d = logp_train - logp_rollout
    assert stats["logp_kl_k3"].item() == pytest.approx(sum(k3) / 4)


def test_identical_logprobs_give_zero_mismatch():
    stats = logp_mismatch(TRAIN, TRAIN.clone(), MASK)
    assert all(v.item() == 0 for v in stats.values())


def test_token_level_weights_are_truncated_ratios():
    w = truncated_is_weights(TRAIN, ROLL, MASK, "token", cap=1.5)
    expected = torch.tensor([[1.5, 1.0, 0.0], [1.0, math.exp(-2.0), 0.0]])  # exp(0.5) = 1.65 > cap
    torch.testing.assert_close(w, expected)


def test_sequence_level_weights_use_the_product_of_ratios():
    w = truncated_is_weights(TRAIN, ROLL, MASK, "sequence", cap=2.0)
    expected = torch.tensor([[math.exp(0.5), math.exp(0.5), 0.0], [math.exp(-2.0), math.exp(-2.0), 0.0]])
    torch.testing.assert_close(w, expected)
    huge = truncated_is_weights(
        torch.zeros(1, 3), torch.full((1, 3), -50.0), torch.ones(1, 3, dtype=torch.bool), "sequence", cap=2.0
    )
    assert torch.all(huge == 2.0)  # truncated, and no overflow from exp(150)


@pytest.mark.parametrize(
    ("level", "cap", "message"),
    [("token", 0.0, r"tis_cap=0.0 must be > 0"), ("word", 2.0, r"level='word' is not known")],
)
def test_bad_options(level, cap, message):
    with pytest.raises(ValueError, match=message):
        truncated_is_weights(TRAIN, ROLL, MASK, level, cap)
