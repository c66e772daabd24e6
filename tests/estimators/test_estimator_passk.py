"""PassAtK against a naive enumeration of k-subsets, its limits, and its expected update."""

import itertools
import math

import pytest
import torch

from lit_grpo.diagnostics import weight_curve
from lit_grpo.estimators import GRPO, PassAtK


def _naive(rewards: torch.Tensor, k: int, variant: str) -> torch.Tensor:
    """Enumerate every k-subset of each group's scorable completions (correct: r >= 0.5)."""
    out = torch.zeros(rewards.shape, dtype=torch.float64)
    for p, row in enumerate(rewards.tolist()):
        idx = [j for j, r in enumerate(row) if not math.isnan(r)]
        hit = {j: float(row[j] >= 0.5) for j in idx}
        n = len(idx)
        if n < k:
            continue
        subsets = list(itertools.combinations(idx, k))
        if variant == "unbiased":  # PKPO s^(loo-1): marginal value of i in each subset, times n
            for i in idx:
                gains = [max(hit[j] for j in s) - max([hit[j] for j in s if j != i], default=0.0)
                         for s in subsets if i in s]
                out[p, i] = n * sum(gains) / len(subsets)
        else:  # GRPO over the subsets (reward = max), averaged over the subsets holding i
            best = [max(hit[j] for j in s) for s in subsets]
            mean = sum(best) / len(best)
            sd = math.sqrt(sum((b - mean) ** 2 for b in best) / len(best))
            if sd == 0:
                continue
            for i in idx:
                mine = [(b - mean) / sd for b, s in zip(best, subsets, strict=True) if i in s]
                out[p, i] = sum(mine) / len(mine)
    return out.float()


def _binary_groups(g: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product([0.0, 1.0], repeat=g)))  # [2^g, g]


@pytest.mark.parametrize("variant", ["unbiased", "normalized"])
@pytest.mark.parametrize("g", [2, 3, 5])
def test_matches_the_enumeration_of_k_subsets_on_every_binary_group(g, variant):
    rewards = _binary_groups(g)
    for k in range(1, g + 1):
        torch.testing.assert_close(PassAtK(k=k, variant=variant)(rewards), _naive(rewards, k, variant))


@pytest.mark.parametrize("variant", ["unbiased", "normalized"])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_matches_the_enumeration_with_unscorable_and_scalar_rewards(k, variant):
    gen = torch.Generator().manual_seed(k)
    rewards = torch.rand(40, 7, generator=gen)  # scalar rewards, thresholded at 0.5
    rewards[torch.rand(40, 7, generator=gen) < 0.25] = math.nan  # some groups keep fewer than k
    torch.testing.assert_close(PassAtK(k=k, variant=variant)(rewards), _naive(rewards, k, variant))


@pytest.mark.parametrize("g", [4, 8])
def test_the_unbiased_update_is_the_gradient_of_pass_at_k(g):
    # E[(1/G) sum_i A_i grad log p_i] / grad p = d/dp (1 - (1 - p)^k) = k (1 - p)^(k - 1), exactly
    ps = torch.tensor([0.05, 0.2, 0.5, 0.8, 0.95], dtype=torch.float64)
    for k in range(1, g + 1):
        torch.testing.assert_close(weight_curve(PassAtK(k=k), g, ps), k * (1 - ps) ** (k - 1))


def test_k_equal_one():
    rewards = torch.tensor([[1.0, 0, 0, 1], [0.9, 0.2, 0.7, 0.4], [1, 1, 1, 1], [0, 0, 0, 0]])
    # unbiased: REINFORCE on the binarised rewards (no baseline is left when k - 1 = 0)
    assert torch.equal(PassAtK(k=1)(rewards), (rewards >= 0.5).float())
    # normalized: GRPO with the population std (GRPO adds eps = 1e-6 to it)
    binary = (rewards >= 0.5).float()
    torch.testing.assert_close(
        PassAtK(k=1, variant="normalized")(rewards), GRPO(std="population")(binary), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("g", [2, 4, 6])
def test_k_equal_g_credits_only_a_unique_correct_completion(g):
    # the k = n transformation (max minus second max, as verl's grpo_passk without its std), times n
    rewards = _binary_groups(g)
    top2 = rewards.topk(2, dim=-1).values  # [2^g, 2]
    expected = torch.where(rewards == top2[:, :1], g * (top2[:, :1] - top2[:, 1:]), 0.0)
    assert torch.equal(PassAtK(k=g)(rewards), expected)


def test_groups_with_fewer_than_k_scorable_completions_give_zero():
    nan = math.nan
    rewards = torch.tensor([[1.0, 0.0, nan, nan, nan], [1.0, 0.0, 0.0, 0.0, nan]])
    for variant in ("unbiased", "normalized"):
        adv = PassAtK(k=3, variant=variant)(rewards)
        assert torch.equal(adv[0], torch.zeros(5)) and adv[1].abs().sum() > 0


def test_no_signal_when_every_k_subset_passes():
    # 3 of 4 correct with k = 2: every pair holds a correct completion, nothing to improve on
    rewards = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert torch.equal(PassAtK(k=2, variant="normalized")(rewards), torch.zeros(1, 4))
    # the unbiased form still credits each correct completion for the pairs it alone passes
    torch.testing.assert_close(PassAtK(k=2)(rewards), torch.tensor([[2 / 3, 2 / 3, 2 / 3, 0.0]]))
