"""Gradient fidelity on a bandit whose gradients are analytic.

A softmax policy over four actions has the exact score ``g(a) = e_a - pi``; actions 0 and 2 are correct,
so ``p = pi_0 + pi_2`` and ``grad p = sum_a pi_a r_a (e_a - pi)``. A pool whose action counts are exactly
``M pi`` is the policy itself: the references are exact up to the finite-population factors stated below,
and the only randomness left is the Monte-Carlo error of the ``S`` subsamples, whose standard errors set
the tolerances (4.5 standard errors: a false alarm has probability below 1e-5 per check, and the seed is fixed).
"""

import itertools
import math

import pytest
import torch

from lit_grpo import GRPO, RLOO, DrGRPO, MaxRL, PassAtK, ReinforcePlusPlus, Sign, SignBalance, SoftmaxGRPO
from lit_grpo.diagnostics.fidelity import (
    bin_rows,
    coordinates,
    objective_derivative,
    pool_weight,
    prompt_fidelity,
    reference_coefficients,
    subsample_indices,
    subsample_weights,
)
from lit_grpo.diagnostics.weight_curve import weight_curve

CORRECT = torch.tensor([1.0, 0.0, 1.0, 0.0])  # reward of each action
G, S = 4, 4000
Z = 4.5  # standard errors


def estimators() -> dict:
    return {
        "GRPO": GRPO(),
        "DrGRPO": DrGRPO(),
        "RLOO": RLOO(),
        "Sign": Sign(),
        "MaxRL": MaxRL(),
        "SoftmaxGRPO": SoftmaxGRPO(),
        "SignBalance": SignBalance(),
        "PassAtK": PassAtK(k=2),
    }


def bandit(counts: list[int]):
    """``(pi [4], rows [M, 4], rewards [M], grad_p [4])`` of a pool holding action ``a`` exactly ``counts[a]`` times."""
    counts_t = torch.tensor(counts)
    M = int(counts_t.sum())
    pi = counts_t.double() / M
    actions = torch.repeat_interleave(torch.arange(4), counts_t)  # [M]
    rows = torch.eye(4, dtype=torch.float64)[actions] - pi  # [M, 4]: the exact score of each draw
    grad_p = ((pi * CORRECT.double())[:, None] * (torch.eye(4, dtype=torch.float64) - pi)).sum(0)  # [4]
    return pi, rows, CORRECT[actions], grad_p


def iid_moments(estimator, pi: torch.Tensor):
    """Exact ``E ghat`` and ``E |ghat - E ghat|^2`` of i.i.d. groups of G, by enumerating all 4^G draws."""
    draws = torch.tensor(list(itertools.product(range(4), repeat=G)))  # [4^G, G]
    prob = pi[draws].prod(-1)  # [4^G]
    adv = estimator(CORRECT[draws]).double()  # [4^G, G]
    score = torch.eye(4, dtype=torch.float64)[draws] - pi  # [4^G, G, 4]
    ghat = (adv[..., None] * score).sum(1) / G  # [4^G, 4]
    mean = (prob[:, None] * ghat).sum(0)
    var = (prob * (ghat - mean).square().sum(-1)).sum()
    return mean, var.item()


POOLS = {"p=0.1875": [128, 320, 64, 512], "p=0.6875": [384, 128, 320, 192]}  # M = 1024 each


@pytest.mark.parametrize("counts", POOLS.values(), ids=POOLS.keys())
def test_references_are_the_analytic_gradients(counts):
    pi, rows, rewards, grad_p = bandit(counts)
    M, c = rows.shape[0], int(rewards.sum())
    p = c / M
    ref = {
        o: reference_coefficients(rewards, o, k=4, T=3) @ rows
        for o in ["reward", "pass@k", "log_pass@k", "maxrl"]
    }
    # expected reward: the leave-one-out form is M / (M - 1) times the population covariance, exactly
    torch.testing.assert_close(ref["reward"], M / (M - 1) * grad_p, rtol=1e-12, atol=1e-15)
    # pass@k on a finite population: k C(M-c, k-1) / C(M-1, k-1) in place of k (1-p)^(k-1), a relative
    # difference below k^2 / (M (1 - p)) (drawing k - 1 others without replacement)
    for name in ["pass@k", "log_pass@k", "maxrl"]:
        want = objective_derivative(name, p, k=4, T=3) * grad_p
        torch.testing.assert_close(ref[name], want, rtol=16 / (M * (1 - p)), atol=1e-15)


def test_objective_derivatives_match_finite_differences():
    for name in ["reward", "pass@k", "log_pass@k", "maxrl"]:
        J = {
            "reward": lambda p: p,
            "pass@k": lambda p: 1 - (1 - p) ** 3,
            "log_pass@k": lambda p: math.log(1 - (1 - p) ** 3),
            "maxrl": lambda p: -sum((1 - p) ** j / j for j in range(1, 6)),
        }[name]
        for p in [0.05, 0.3, 0.8]:
            h = 1e-6
            numeric = (J(p + h) - J(p - h)) / (2 * h)
            assert objective_derivative(name, p, k=3, T=5).item() == pytest.approx(numeric, rel=1e-6)
    assert objective_derivative("maxrl", 0.0, T=7).item() == 7.0  # the limit p -> 0


@pytest.mark.parametrize("counts", POOLS.values(), ids=POOLS.keys())
def test_measured_weights_and_variances_match_the_exact_values(counts):
    pi, rows, rewards, grad_p = bandit(counts)
    M, c = rows.shape[0], int(rewards.sum())
    gen = torch.Generator().manual_seed(0)
    result = prompt_fidelity(rows, rewards, estimators(), G, S, k=2, T=G - 1, generator=gen)
    for name, estimator in estimators().items():
        omega = result.omegas[name]
        # the subsample expectation for this pool, exactly; the i.i.d. curve differs from it by O(G / M)
        assert abs(omega - pool_weight(estimator, G, M, c)) <= Z * result.omega_ses[name], name
        curve = weight_curve(estimator, G, [c / M]).item()
        assert pool_weight(estimator, G, M, c) == pytest.approx(curve, rel=2 * G / M), name
        # the mean is omega grad p: its cosine with the exact gradient is 1
        mean = result.means[name]
        assert (mean @ grad_p / (mean.norm() * grad_p.norm())).item() > 0.999, name
        # the variance of one group's estimate: i.i.d. groups (enumerated) against subsamples of the pool;
        # the Monte-Carlo error of a mean of S squared deviations, plus without-replacement draws (O(G / M))
        _, var = iid_moments(estimator, pi)
        measured = result.variances[name]
        se = _variance_se(estimator, rows, rewards)
        assert abs(measured - var) <= Z * se + 2 * G / M * var, name


def _variance_se(estimator, rows, rewards) -> float:
    """Standard error of the variance estimate from S subsamples (its own spread over a fresh draw)."""
    gen = torch.Generator().manual_seed(1)
    w = subsample_weights(estimator, rewards.double(), subsample_indices(rows.shape[0], G, S, gen))
    est = w @ rows
    dev = (est - est.mean(0)).square().sum(-1)  # [S]
    return dev.std().item() / math.sqrt(S)


def test_iid_enumeration_agrees_with_the_weight_curve():  # the test's own yardstick
    pi, _, _, grad_p = bandit(POOLS["p=0.1875"])
    p = (pi * CORRECT.double()).sum().item()
    for name, estimator in estimators().items():
        mean, _ = iid_moments(estimator, pi)
        torch.testing.assert_close(mean, weight_curve(estimator, G, [p]).item() * grad_p, msg=name)


def test_bins_sum_prompts_and_compare_their_weighting_with_each_objective():
    gen = torch.Generator().manual_seed(2)
    pools = [bandit(POOLS["p=0.1875"]), bandit(POOLS["p=0.6875"])]
    # rotate the second bandit's gradient so the two prompts' gradients are not collinear
    perm = torch.tensor([1, 2, 3, 0])
    pools[1] = (pools[1][0], pools[1][1][:, perm], pools[1][2], pools[1][3][perm])
    chosen = {"GRPO": GRPO(), "MaxRL": MaxRL()}
    prompts = [prompt_fidelity(rows, r, chosen, G, S, k=2, T=G - 1, generator=gen) for _, rows, r, _ in pools]
    table = {
        (row["estimator"], row["objective"], row["bin"]): row
        for row in bin_rows(prompts, list(chosen), ["reward", "maxrl"])
    }
    assert {b for _, _, b in table} == {"all", "0.0-0.2", "0.5-0.7"}
    M = 1024
    for name, estimator in chosen.items():
        # predicted: the sum of each prompt's pool weight times its reward reference
        refs = [p.references["reward"] for p in prompts]
        want_mean = sum(
            pool_weight(estimator, G, M, p.num_correct) * ref for p, ref in zip(prompts, refs, strict=True)
        )
        got_mean = sum(p.means[name] for p in prompts)
        spread = math.sqrt(
            sum(p.variances[name] for p in prompts) / S
        )  # Monte-Carlo error of the summed mean
        assert (got_mean - want_mean).norm().item() <= Z * spread
        for objective in ["reward", "maxrl"]:
            ref = sum(p.references[objective] for p in prompts)
            cos = (want_mean @ ref / (want_mean.norm() * ref.norm())).item()
            row = table[name, objective, "all"]
            assert row["prompts"] == 2
            assert row["cos"] == pytest.approx(cos, abs=2 * Z * spread / want_mean.norm().item())
            assert row["variance"] == pytest.approx(sum(p.variances[name] for p in prompts))
            assert row["snr"] == pytest.approx(got_mean.norm().item() / math.sqrt(row["variance"]))
    # MaxRL at group size G climbs J_T with T = G - 1: aligned with it, not with the expected reward
    ref = sum(p.references["maxrl"] for p in prompts)
    spread = math.sqrt(sum(p.variances["MaxRL"] for p in prompts) / S) / ref.norm().item()
    assert table["MaxRL", "maxrl", "all"]["cos"] == pytest.approx(1.0, abs=Z * spread)
    # its norm matches up to the Monte-Carlo error and the finite pool's factors (about 1%)
    assert table["MaxRL", "maxrl", "all"]["norm_ratio"] == pytest.approx(1.0, abs=Z * spread + 0.01)
    assert table["MaxRL", "reward", "all"]["cos"] < 0.99


def test_coordinates_keep_every_inner_product():
    gen = torch.Generator().manual_seed(3)
    rows = torch.randn(6, 50, generator=gen, dtype=torch.float64)
    coords = coordinates(rows)
    assert coords.shape == (6, 6)
    a, b = torch.randn(2, 6, generator=gen, dtype=torch.float64)
    assert (a @ coords) @ (b @ coords) == pytest.approx(((a @ rows) @ (b @ rows)).item(), rel=1e-10)
    torch.testing.assert_close(coordinates(rows[:, :4]), rows[:, :4])


def test_subsamples_are_distinct_and_uniform():
    gen = torch.Generator().manual_seed(4)
    index = subsample_indices(10, 4, 20000, gen)
    assert all(len(set(row.tolist())) == 4 for row in index[:200])
    freq = torch.bincount(index.flatten(), minlength=10).double() / index.numel()
    assert (freq - 0.1).abs().max() < 4.5 * math.sqrt(0.1 * 0.9 / index.numel()) * 2


def test_bad_input_is_refused():
    rows = torch.zeros(8, 3)
    with pytest.raises(ValueError, match="binary rewards"):
        prompt_fidelity(rows, torch.full((8,), 0.5), {"GRPO": GRPO()}, 4, 10)
    with pytest.raises(ValueError, match="statistic of the whole batch"):
        prompt_fidelity(rows, torch.tensor([1.0, 0, 0, 1, 0, 0, 1, 0]), {"R": ReinforcePlusPlus()}, 4, 10)
    with pytest.raises(ValueError, match="one row per completion"):
        prompt_fidelity(rows[:7], torch.zeros(8), {"GRPO": GRPO()}, 4, 10)
    with pytest.raises(ValueError, match="1 <= k <= M"):
        reference_coefficients(torch.zeros(8), "pass@k", k=9)
    with pytest.raises(ValueError, match="choose from"):
        reference_coefficients(torch.zeros(8), "pass@1")
