"""Group statistics of lit_grpo.estimators.functional."""

import math

import torch

from lit_grpo.diagnostics.degeneracy import degenerate_groups
from lit_grpo.estimators.functional import (
    centred,
    constant_groups,
    group_count,
    group_mean,
    group_std,
    grpo_advantages,
)

NAN = math.nan


def test_statistics_match_torch_without_nan():
    rewards = torch.rand(5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(group_mean(rewards), rewards.mean(-1, keepdim=True))
    torch.testing.assert_close(group_std(rewards), rewards.std(-1, keepdim=True))
    torch.testing.assert_close(group_std(rewards, "population"), rewards.std(-1, correction=0, keepdim=True))


def test_statistics_leave_nan_out():
    rewards = torch.tensor(
        [[1.0, NAN, 0.0, 0.0], [NAN, NAN, NAN, NAN], [NAN, 2.0, NAN, NAN]], dtype=torch.float64
    )
    assert group_count(rewards).flatten().tolist() == [3, 0, 1]
    torch.testing.assert_close(
        group_mean(rewards).flatten(), torch.tensor([1 / 3, 0.0, 2.0], dtype=torch.float64)
    )
    sample = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64).std()
    torch.testing.assert_close(
        group_std(rewards).flatten(),
        torch.stack([sample, torch.tensor(0.0).double(), torch.tensor(0.0).double()]),
    )
    assert group_std(rewards, "population")[2].item() == 0.0


def test_constant_groups_use_a_scale_aware_tolerance():
    rewards = torch.tensor(
        [
            [0.0, 5e-7, 0.0],  # below 1e-6 absolute
            [0.0, 2e-6, 0.0],
            [1e6, 1e6 + 0.5, 1e6],  # below 1e-6 relative
            [1e6, 1e6 + 4.0, 1e6],
            [3.0, NAN, NAN],  # one scorable reward
            [NAN, NAN, NAN],
        ],
        dtype=torch.float64,
    )
    assert constant_groups(rewards).flatten().tolist() == [True, False, True, False, True, True]


def test_degenerate_groups_are_the_constant_groups_at_any_scale():
    rewards = torch.tensor([[5.0, 5.0 + 3e-6, 5.0], [5.0, 5.1, 5.0], [1e6, 1e6 + 0.5, 1e6], [0.0, 2e-6, 0.0]])
    constant = constant_groups(rewards).flatten()
    assert constant.tolist() == [True, False, True, False]
    assert torch.equal(degenerate_groups(rewards)["degenerate"], constant)
    assert torch.equal(grpo_advantages(rewards).abs().sum(-1) == 0, constant)


def test_centred_is_exactly_zero_on_constant_groups_and_nan():
    rewards = torch.tensor([[0.1, 0.1, 0.1], [1.0, NAN, 0.0]], dtype=torch.float64)
    expected = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.0, -0.5]], dtype=torch.float64)
    assert torch.equal(centred(rewards), expected)
