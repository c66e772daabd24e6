"""Invariants and limits of the estimators (METHODS.md section 1)."""

import itertools
import math

import pytest
import torch

from lit_grpo.estimators import (
    GPG,
    GRPO,
    REGISTRY,
    RLOO,
    DrGRPO,
    MaxRL,
    PassAtK,
    ReinforcePlusPlus,
    Sign,
    SignBalance,
    SoftmaxGRPO,
)

SHIFT_INVARIANT = [
    GRPO(),
    GRPO(std="population"),
    GRPO(scale="batch"),
    GRPO(scale="none"),
    DrGRPO(),
    RLOO(),
    SoftmaxGRPO(),
    SoftmaxGRPO(tau=0.3),
    ReinforcePlusPlus(),
    ReinforcePlusPlus(std="population"),
    GPG(),
    GPG(normalize="std"),
]
CENTRED = [*SHIFT_INVARIANT, MaxRL(), PassAtK(k=2, variant="normalized"), PassAtK(variant="normalized")]
VARIANTS = [
    *CENTRED,
    Sign(),
    SignBalance(),
    SignBalance(c=2.0, all_correct="push"),
    PassAtK(),
    PassAtK(k=2),
    PassAtK(k=1),
]
#: The variants above and every other registered estimator at its defaults.
ALL = [*VARIANTS, *(cls() for cls in REGISTRY.values() if not any(type(e) is cls for e in VARIANTS))]


def _call(estimator, rewards: torch.Tensor) -> torch.Tensor:
    """The advantages of ``rewards`` with equal completion lengths (for the estimators that need lengths)."""
    return estimator(rewards, lengths=torch.ones(rewards.shape))


def _rewards(kind: str, p: int = 64, g: int = 8, nan_frac: float = 0.0, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    r = torch.rand(p, g, generator=gen, dtype=torch.float64)  # [P, G]
    if kind == "binary":
        r = (r < 0.5).double()
    return r.masked_fill(torch.rand(p, g, generator=gen) < nan_frac, math.nan)


@pytest.mark.parametrize("kind", ["binary", "uniform"])
@pytest.mark.parametrize("estimator", CENTRED, ids=repr)
def test_centred_estimators_sum_to_zero_per_group(estimator, kind):
    adv = estimator(_rewards(kind, nan_frac=0.2)).double()
    torch.testing.assert_close(adv.sum(-1), torch.zeros(64, dtype=torch.float64), rtol=0, atol=1e-5)


@pytest.mark.parametrize("c", [1.0, 0.5, 2.5])
def test_sign_balance_sums_to_zero_on_mixed_groups(c):
    rewards = _rewards("binary", nan_frac=0.2)
    k = (rewards == 1).sum(-1)
    mixed = (k > 0) & (k < (~rewards.isnan()).sum(-1))
    adv = SignBalance(c=c)(rewards).double()[mixed]
    torch.testing.assert_close(adv.sum(-1), torch.zeros(len(adv), dtype=torch.float64), rtol=0, atol=1e-5)


@pytest.mark.parametrize("shift", [-3.0, 0.25, 10.0])
@pytest.mark.parametrize("estimator", SHIFT_INVARIANT, ids=repr)
def test_shift_invariance(estimator, shift):
    rewards = _rewards("uniform", nan_frac=0.1)
    torch.testing.assert_close(estimator(rewards + shift), estimator(rewards), rtol=0, atol=1e-5)


@pytest.mark.parametrize("factor", [0.5, 4.0, 1000.0])
@pytest.mark.parametrize(
    "estimator",
    [GRPO(), GRPO(std="population"), GRPO(scale="batch"), MaxRL(), ReinforcePlusPlus(), GPG(normalize="std")],
    ids=repr,
)
def test_scale_invariance(estimator, factor):
    rewards = _rewards("binary", nan_frac=0.1)
    torch.testing.assert_close(estimator(rewards * factor), estimator(rewards), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("factor", [0.5, 4.0, 1000.0])
def test_scale_equivariance(factor):
    rewards = _rewards("uniform")
    for estimator in (DrGRPO(), RLOO(), GPG()):
        torch.testing.assert_close(estimator(rewards * factor), factor * estimator(rewards))
    scaled = SoftmaxGRPO(tau=0.3 * factor)(rewards * factor)
    torch.testing.assert_close(scaled, SoftmaxGRPO(tau=0.3)(rewards), rtol=1e-5, atol=1e-5)


CONSTANT_ROWS = [
    [0.0] * 4,
    [1.0] * 4,
    [0.1] * 4,
    [1 / 3] * 4,
    [7.0] * 4,
    [1e6] * 4,
    [1.0, 1 + 1e-9, 1.0, 1 - 1e-9],  # spread below the tolerance
    [0.3, 0.3 + 5e-7, 0.3, 0.3],
    [1e6, 1e6 + 0.5, 1e6, 1e6],  # relative spread 5e-7
    [2.0, math.nan, 2.0, math.nan],
    [0.7, math.nan, math.nan, math.nan],  # a single scorable reward
    [math.nan] * 4,
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("estimator", [*CENTRED, SignBalance(), PassAtK(), PassAtK(k=2)], ids=repr)
def test_constant_groups_give_exactly_zero(estimator, dtype):
    rewards = torch.tensor(CONSTANT_ROWS, dtype=dtype)
    assert torch.equal(estimator(rewards), torch.zeros(len(CONSTANT_ROWS), 4))


def test_spread_above_the_tolerance_is_not_constant():
    rewards = torch.tensor([[0.3, 0.3 + 1e-5, 0.3, 0.3]], dtype=torch.float64)
    assert DrGRPO()(rewards).abs().max() > 0


@pytest.mark.parametrize("kind", ["binary", "uniform"])
@pytest.mark.parametrize("estimator", ALL, ids=repr)
def test_nan_rewards_are_left_out_and_get_zero(estimator, kind):
    for seed in range(5):
        row = _rewards(kind, p=1, g=7, nan_frac=0.3, seed=seed)[0]  # [G]
        scorable = ~row.isnan()
        adv = _call(estimator, row[None])[0]
        assert torch.equal(adv[~scorable], torch.zeros(int((~scorable).sum())))
        torch.testing.assert_close(adv[scorable], _call(estimator, row[scorable][None])[0])


@pytest.mark.parametrize("bad", [math.inf, -math.inf])
@pytest.mark.parametrize("estimator", ALL, ids=repr)
def test_infinite_rewards_raise(estimator, bad):
    rewards = torch.tensor([[1.0, bad, 0.0], [bad, 0.0, math.nan]])
    with pytest.raises(ValueError, match=r"2 infinite value\(s\).*NaN"):
        _call(estimator, rewards)


def _binary_groups(g: int) -> torch.Tensor:
    """Every binary group of size ``g`` with at least one correct completion: [2^g - 1, g]."""
    rows = [r for r in itertools.product([0.0, 1.0], repeat=g) if any(r)]
    return torch.tensor(rows)


@pytest.mark.parametrize("g", [2, 4, 6])
def test_softmax_tends_to_maxrl_as_tau_goes_to_zero(g):
    rewards = _binary_groups(g)
    torch.testing.assert_close(SoftmaxGRPO(tau=1e-4)(rewards), MaxRL()(rewards), rtol=0, atol=1e-4)


def test_softmax_tends_to_drgrpo_over_tau_as_tau_grows():
    rewards = _rewards("uniform", nan_frac=0.1)
    tau = 1e4
    torch.testing.assert_close(SoftmaxGRPO(tau=tau)(rewards) * tau, DrGRPO()(rewards), rtol=0, atol=1e-3)


@pytest.mark.parametrize("c", [1.0, 0.5, 2.5])
@pytest.mark.parametrize("g", [2, 4, 6])
def test_sign_balance_is_maxrl_times_balance_ratio(g, c):
    rewards = _binary_groups(g)[:-1]  # drop the all-correct group: mixed groups only
    k = rewards.sum(-1, keepdim=True)  # [P, 1]
    expected = MaxRL()(rewards) * c * k / (g - k)
    torch.testing.assert_close(SignBalance(c=c)(rewards), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("g", [2, 4, 8])
def test_rloo_is_drgrpo_times_g_over_g_minus_one(g):
    rewards = _rewards("uniform", g=g)
    torch.testing.assert_close(RLOO()(rewards), g / (g - 1) * DrGRPO()(rewards))


def test_sign_balance_thresholds_scalar_rewards_at_one_half():
    scalar = torch.tensor([[0.9, 0.2, 0.5, 0.49]])
    assert torch.equal(SignBalance()(scalar), SignBalance()(torch.tensor([[1.0, 0.0, 1.0, 0.0]])))


def test_maxrl_gives_zero_when_the_mean_is_zero_within_tolerance():
    rewards = torch.tensor([[3e-6, 0.0, 0.0, 0.0]], dtype=torch.float64)  # not constant, mu = 7.5e-7
    assert torch.equal(MaxRL()(rewards), torch.zeros(1, 4))


def test_maxrl_rejects_negative_rewards():
    with pytest.raises(ValueError, match=r"rewards >= 0, got 2 negative.*rescale"):
        MaxRL()(torch.tensor([[-1.0, 0.0, 1.0], [0.5, -0.5, math.nan]]))


def test_sign_is_not_centred():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.25, math.nan]])
    assert torch.equal(Sign()(rewards), torch.tensor([[1.0, 1.0], [-1.0, -1.0], [-0.5, 0.0]]))


def test_min_group_size():
    assert GRPO().min_group_size == 2  # the sample std of one completion is undefined
    assert GRPO(std="population").min_group_size == 1
    assert GRPO(scale="none").min_group_size == 1
    for estimator in (DrGRPO(), RLOO(), Sign(), SoftmaxGRPO(), MaxRL(), SignBalance(), PassAtK(k=1)):
        assert estimator.min_group_size == 1
    # one completion has no group baseline: G = 1 would silently train on nothing
    assert ReinforcePlusPlus().min_group_size == 2 and GPG().min_group_size == 2
    assert PassAtK(k=3).min_group_size == 3  # pass@k needs at least k samples


@pytest.mark.parametrize("estimator", [*CENTRED, SignBalance(), PassAtK(k=2)], ids=repr)
def test_groups_of_one_give_zero(estimator):
    assert torch.equal(estimator(torch.tensor([[0.3], [1.0]])), torch.zeros(2, 1))
