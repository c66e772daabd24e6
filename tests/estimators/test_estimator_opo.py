"""OPO's length-weighted baseline: the pure function and the estimator the training step calls with lengths."""

import math

import pytest
import torch

from lit_grpo.estimators import OPO, DrGRPO
from lit_grpo.estimators.functional import opo_advantages

NAN = math.nan


def _naive(rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(rewards.shape)
    for p, (row, lens) in enumerate(zip(rewards.tolist(), lengths.tolist(), strict=True)):
        group = [(j, r, length) for j, (r, length) in enumerate(zip(row, lens, strict=True)) if not math.isnan(r)]
        total = sum(length for *_, length in group)
        if len({r for _, r, _ in group}) <= 1 or total == 0:
            continue
        baseline = sum(r * length for _, r, length in group) / total
        for j, r, _ in group:
            out[p, j] = r - baseline
    return out


def test_golden_values_by_hand():
    rewards = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    lengths = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [10, 10, 10, 10]])
    # b = 1/10, (1 + 2)/10, (1 + 2 + 3)/10, and 1/4 for equal lengths
    expected = torch.tensor(
        [[0.9, -0.1, -0.1, -0.1], [0.7, 0.7, -0.3, -0.3], [0.4, 0.4, 0.4, -0.6], [0.75, -0.25, -0.25, -0.25]]
    )
    torch.testing.assert_close(opo_advantages(rewards, lengths), expected)


def test_matches_a_naive_implementation_with_unscorable_rewards():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(30, 6, generator=gen, dtype=torch.float64)
    rewards[torch.rand(30, 6, generator=gen) < 0.3] = NAN
    rewards[0] = 0.5  # constant
    lengths = torch.randint(0, 40, (30, 6), generator=gen)
    lengths[1] = 0  # no tokens at all
    torch.testing.assert_close(opo_advantages(rewards, lengths), _naive(rewards, lengths))


def test_equal_lengths_give_drgrpo_and_only_length_ratios_matter():
    gen = torch.Generator().manual_seed(1)
    rewards = torch.rand(8, 5, generator=gen)
    torch.testing.assert_close(opo_advantages(rewards, torch.full((8, 5), 7)), DrGRPO()(rewards))
    lengths = torch.randint(1, 50, (8, 5), generator=gen)
    torch.testing.assert_close(opo_advantages(rewards, lengths), opo_advantages(rewards, 3.5 * lengths))
    torch.testing.assert_close(opo_advantages(rewards + 2.0, lengths), opo_advantages(rewards, lengths))


def test_no_signal_groups_give_exactly_zero():
    rewards = torch.tensor([[1.0, NAN, NAN], [0.3, 0.3, 0.3], [1.0, 0.0, NAN], [NAN, NAN, NAN]])
    lengths = torch.tensor([[5, 1, 1], [1, 2, 3], [0, 0, 9], [1, 1, 1]])
    # a single completion has no baseline (verl's compute_opo_outcome_advantage keeps its raw reward);
    # the third group's scorable completions have no tokens
    assert torch.equal(opo_advantages(rewards, lengths), torch.zeros(4, 3))


def test_output_contract():
    rewards = torch.tensor([[1.0, 0.0, NAN]], dtype=torch.bfloat16, requires_grad=True)
    lengths = torch.tensor([[3.0, 1.0, 2.0]], requires_grad=True)
    adv = opo_advantages(rewards, lengths)
    assert adv.dtype == torch.float32 and adv.grad_fn is None
    torch.testing.assert_close(adv, torch.tensor([[0.25, -0.75, 0.0]]))


def test_the_estimator_reads_the_lengths_it_is_given():
    rewards = torch.tensor([[1.0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    lengths = torch.tensor([[1, 2, 3, 4]] * 5)
    # methods.md section 5, column "OPO, lengths 1 2 3 4"
    expected = torch.tensor([[0.9, -0.1, -0.1, -0.1], [0.7, 0.7, -0.3, -0.3], [0.4, 0.4, 0.4, -0.6], [0.0] * 4,
                             [0.0] * 4])
    torch.testing.assert_close(OPO()(rewards, lengths=lengths), expected)


def test_the_estimator_without_lengths_is_a_clear_error():
    with pytest.raises(ValueError, match=r"OPO needs the completion lengths: call it as estimator\(rewards, lengths="):
        OPO()(torch.tensor([[1.0, 0.0]]))


def test_its_weight_curve_is_drgrpos_at_equal_lengths():
    from lit_grpo.diagnostics.weight_curve import weight_curve

    ps = [0.1, 0.5, 0.9]
    torch.testing.assert_close(weight_curve(OPO(), 4, ps), weight_curve(DrGRPO(), 4, ps))
