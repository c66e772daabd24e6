import math

import pytest
import torch

from lit_grpo.diagnostics import (
    DIFFICULTY_BINS,
    advantage_budget,
    advantage_mass,
    bin_index,
    budget_shares,
    positive_negative_shares,
)


def test_bin_edges():
    assert DIFFICULTY_BINS == (0.0, 0.2, 0.5, 0.7, 0.9, 1.0)
    rate = torch.tensor([0.0, 0.19, 0.2, 0.5, 0.69, 0.7, 0.9, 1.0, math.nan, -0.1, 1.1])
    assert bin_index(rate).tolist() == [0, 0, 1, 2, 2, 3, 4, 4, -1, -1, -1]
    assert bin_index(torch.tensor([0.2], dtype=torch.float64)).tolist() == [1]
    assert bin_index(torch.tensor([0, 1])).tolist() == [0, 4]


def test_budget_shares():
    budget = torch.tensor([1.0, 3.0, 2.0, 4.0, 5.0])
    rate = torch.tensor([0.1, 0.95, 0.6, 1.0, math.nan])  # the NaN prompt is left out
    shares = budget_shares(budget, rate)
    assert shares.tolist() == pytest.approx([0.1, 0.0, 0.2, 0.0, 0.7])
    assert shares.sum().item() == pytest.approx(1.0)
    assert budget_shares(torch.zeros(2), torch.tensor([0.1, 0.5])).tolist() == [0.0] * 5
    with pytest.raises(ValueError, match=r"shape \[P\]"):
        budget_shares(torch.ones(2), torch.ones(3))


def test_advantage_budget_and_mass():
    adv = torch.tensor([[1.5, -0.5, -0.5, -0.5], [0.0, 0.0, 0.0, 0.0]])
    lengths = torch.tensor([[10, 20, 30, 40], [5, 5, 5, 5]])
    assert advantage_budget(adv, lengths).tolist() == [15.0 + 10 + 15 + 20, 0.0]
    assert advantage_budget(adv, lengths.flatten()).tolist() == [60.0, 0.0]  # [N] group-major
    assert advantage_mass(adv).tolist() == [1.5, 0.0]
    with pytest.raises(ValueError, match="one length per completion"):
        advantage_budget(adv, torch.ones(3))


def test_positive_negative_shares():
    adv = torch.tensor([[3.0, -1.0], [0.0, 0.0]])
    assert positive_negative_shares(adv) == pytest.approx((0.75, 0.25))
    weights = torch.tensor([[1.0, 3.0], [7.0, 7.0]])
    assert positive_negative_shares(adv, weights) == pytest.approx((0.5, 0.5))
    pos, neg = positive_negative_shares(torch.zeros(2, 2))  # nothing to share: not a 0 to average in
    assert math.isnan(pos) and math.isnan(neg)
