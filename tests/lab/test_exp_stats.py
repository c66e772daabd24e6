"""Expected numbers were computed once with an independent reference implementation and hard-coded."""

import math

import pytest
import torch

from lit_grpo.lab.stats import (
    betainc,
    detectable_difference,
    interquartile_mean,
    permutation_test,
    summarize,
    t_quantile,
    t_sf,
    t_test_power,
    welch_t_test,
)


@pytest.mark.parametrize(
    ("q", "df", "want"),
    [
        (0.975, 1, 12.706204736174694),
        (0.975, 4, 2.7764451051977934),
        (0.975, 6.5, 2.4020020079102764),
        (0.995, 9, 3.249835541592126),
        (0.95, 30, 1.697260886593957),
        (0.025, 3, -3.1824463052837086),
    ],
)
def test_t_quantile(q, df, want):
    assert t_quantile(q, df) == pytest.approx(want, rel=1e-9)
    assert t_sf(want, df) == pytest.approx(1 - q, rel=1e-9)


@pytest.mark.parametrize(
    ("a", "b", "x", "want"),
    [
        (2, 3, 0.4, 0.5248),
        (0.5, 0.5, 0.9, 0.7951672353008665),
        (5, 0.5, 0.3, 0.0006913033857629756),
        (10, 20, 0.35, 0.5923866636639051),
    ],
)
def test_betainc(a, b, x, want):
    assert betainc(a, b, x) == pytest.approx(want, rel=1e-10)


def test_summarize_golden():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0, 10.0])
    assert s["n"] == 6
    assert s["mean"] == pytest.approx(4.166666666666667)
    assert s["sd"] == pytest.approx(3.1885210782848317)
    assert s["ci_low"] == pytest.approx(0.82051900855499)
    assert s["ci_high"] == pytest.approx(7.512814324778343)
    assert s["iqm"] == pytest.approx(3.5)
    assert s["iqm_ci_low"] <= s["iqm"] <= s["iqm_ci_high"]
    assert 1.0 <= s["iqm_ci_low"] and s["iqm_ci_high"] <= 10.0


def test_summarize_bootstrap_seeded_and_degenerate_cases():
    values = [0.3, 0.5, 0.4, 0.9, 0.1, 0.6, 0.7]
    assert summarize(values, seed=1) == summarize(values, seed=1)
    assert summarize(values, seed=1)["iqm_ci_low"] != summarize(values, seed=2)["iqm_ci_low"]
    const = summarize([2.0, 2.0, 2.0])
    assert (const["sd"], const["ci_low"], const["iqm_ci_low"], const["iqm_ci_high"]) == (0.0, 2.0, 2.0, 2.0)
    one = summarize(torch.tensor([0.7]))
    assert one["n"] == 1 and one["mean"] == one["iqm"] == pytest.approx(0.7)
    assert math.isnan(one["sd"]) and math.isnan(one["ci_low"])


def test_summarize_errors():
    with pytest.raises(ValueError, match="NaN"):
        summarize([1.0, math.nan])
    with pytest.raises(ValueError, match="at least 1"):
        summarize([])
    with pytest.raises(ValueError, match="confidence"):
        summarize([1.0], confidence=95)


def test_interquartile_mean():
    assert interquartile_mean(torch.tensor([3.0, 1, 4, 1, 5, 9, 2, 6])).item() == pytest.approx(3.5)
    assert interquartile_mean(torch.tensor([1.0, 2, 3, 4, 5])).item() == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        ([1.0, 2, 3, 4], [2.0, 4, 6, 8, 9], (-2.301081417250779, 5.7922078580738745, 0.06255581707060957)),
        (
            [0.71, 0.74, 0.69, 0.77, 0.73, 0.75, 0.70],
            [0.28, 0.31, 0.25, 0.30, 0.27, 0.29, 0.33],
            (29.62832259848672, 11.921300787768248, 1.5602547416336633e-12),
        ),
        (
            [0.52, 0.55, 0.49, 0.61],
            [0.50, 0.47, 0.53, 0.44, 0.51, 0.46],
            (1.9746551342608896, 4.764437209141793, 0.10812297797083754),
        ),
    ],
)
def test_welch_t_test(a, b, want):
    assert welch_t_test(a, b) == pytest.approx(want, rel=1e-7)


def test_welch_zero_variance_and_errors():
    t, df, p = welch_t_test([1.0, 1.0], [1.0, 1.0])
    assert math.isnan(t) and math.isnan(df) and math.isnan(p)
    t, _, p = welch_t_test([2.0, 2.0], [1.0, 1.0])  # no spread in either: undefined, not p = 0
    assert math.isnan(t) and math.isnan(p)
    with pytest.raises(ValueError, match="at least 2"):
        welch_t_test([1.0], [1.0, 2.0])


def test_permutation_exact():
    # 20 splits of {1..6} into 3 + 3; only the observed split and its mirror reach |diff| = 3.
    assert permutation_test([1.0, 2, 3], [4.0, 5, 6]) == pytest.approx(0.1)
    assert permutation_test([0.71, 0.74, 0.69, 0.77], [0.68, 0.70, 0.66, 0.72, 0.69]) == pytest.approx(1 / 9)
    assert permutation_test([1.0, 1.0], [1.0, 1.0]) == 1.0


def test_permutation_monte_carlo():
    a = [0.61, 0.58, 0.66, 0.55, 0.63, 0.60, 0.59, 0.64, 0.57, 0.62]
    b = [0.56, 0.52, 0.60, 0.54, 0.58, 0.51, 0.57, 0.55, 0.59, 0.53, 0.50, 0.61]
    p = permutation_test(a, b)  # C(22, 10) = 646646 splits: Monte Carlo
    assert p == pytest.approx(0.00426972408396557, abs=0.002)  # exact p-value of all splits
    assert p == permutation_test(a, b)
    assert p >= 1 / 10001
    with pytest.raises(ValueError, match="n_resamples"):
        permutation_test(a, b, n_resamples=0)


def test_stratified_permutation_with_one_stratum_is_the_permutation_test():
    from lit_grpo.lab.stats import stratified_permutation_test

    a, b = [0.71, 0.74, 0.69, 0.77], [0.68, 0.70, 0.66, 0.72, 0.69]
    assert stratified_permutation_test([(a, b)]) == pytest.approx(permutation_test(a, b))


def test_stratified_permutation_exact_by_enumeration():
    import itertools

    from lit_grpo.lab.stats import stratified_permutation_test

    # by hand: one value per arm in each of two strata; the 4 relabellings give means over strata of
    # (1 + 1)/2, (1 - 1)/2, (-1 + 1)/2, (-1 - 1)/2: |statistic| >= 1 in 2 of 4
    assert stratified_permutation_test([([1.0], [0.0]), ([3.0], [2.0])]) == pytest.approx(0.5)
    strata = [([0.5, 0.9, 0.7], [0.2, 0.4]), ([10.0, 11.0], [9.0, 9.5, 12.0])]  # levels far apart

    def stat(splits):
        return sum(sum(x) / len(x) - sum(y) / len(y) for x, y in splits) / len(splits)

    def relabellings(a, b):
        pooled = a + b
        for idx in itertools.combinations(range(len(pooled)), len(a)):
            yield [pooled[i] for i in idx], [pooled[i] for i in range(len(pooled)) if i not in idx]

    observed = abs(stat(strata))
    joint = list(itertools.product(*(relabellings(a, b) for a, b in strata)))  # 10 x 10
    expected = sum(abs(stat(j)) >= observed - 1e-12 for j in joint) / len(joint)
    assert stratified_permutation_test(strata) == pytest.approx(expected)
    # mixing the strata (an unstratified test) would see the level gap, not the arm difference
    assert expected != pytest.approx(permutation_test([0.5, 0.9, 0.7, 10.0, 11.0], [0.2, 0.4, 9.0, 9.5, 12.0]))


def test_stratified_permutation_monte_carlo_and_bad_input():
    from lit_grpo.lab.stats import stratified_permutation_test

    gen = torch.Generator().manual_seed(1)
    shifted = [((torch.randn(7, generator=gen) + 1).tolist(), torch.randn(7, generator=gen).tolist()) for _ in range(3)]
    p = stratified_permutation_test(shifted)  # 3432^3 relabellings: Monte Carlo
    assert p < 0.01 and p == stratified_permutation_test(shifted)  # seeded: reproducible
    null = [(torch.randn(7, generator=gen).tolist(), torch.randn(7, generator=gen).tolist()) for _ in range(3)]
    assert stratified_permutation_test(null) > 0.05
    with pytest.raises(ValueError, match="at least one stratum"):
        stratified_permutation_test([])
    with pytest.raises(ValueError, match="n_resamples"):
        stratified_permutation_test(shifted, n_resamples=0)


def test_t_test_power():
    """Against R's power.t.test(n = 10, delta = 1, sd = 1, type = "one.sample", strict = TRUE): 0.8030969; at no
    effect the power is the level (up to the quadrature's error, below 1e-6), and at large n the normal limit."""
    assert t_test_power(10, 1.0, 1.0) == pytest.approx(0.8030969, abs=1e-6)
    for n in (2, 3, 10):
        assert t_test_power(n, 0.0, 1.0) == pytest.approx(0.05, abs=1e-6)
    assert t_test_power(4, -0.05, 0.1) == t_test_power(4, 0.05, 0.1) < t_test_power(8, 0.05, 0.1)
    c = t_quantile(0.975, 999)
    normal = 0.5 * math.erfc(-(0.1 * math.sqrt(1000) - c) / math.sqrt(2))
    assert t_test_power(1000, 0.1, 1.0) == pytest.approx(normal, abs=1e-3)  # the sample sd varies little
    with pytest.raises(ValueError, match="sd > 0"):
        t_test_power(4, 0.05, 0.0)
    with pytest.raises(ValueError, match="n >= 2"):
        t_test_power(1, 0.05, 0.1)


def test_detectable_difference_inverts_the_power():
    """R's power.t.test(n = 10, sd = 1, power = 0.8030969, type = "one.sample", strict = TRUE) gives delta = 1
    (the golden value above); the quadrature's 1e-6 error in power moves delta by about that over the power's
    slope there (about 0.8), so 1e-4 is a safe bound. The size scales with sd and shrinks with n and alpha."""
    assert detectable_difference(10, 1.0, power=0.8030969) == pytest.approx(1.0, abs=1e-4)
    five = detectable_difference(5, 0.1, alpha=0.05 / 3)
    assert detectable_difference(5, 0.2, alpha=0.05 / 3) == pytest.approx(2 * five, rel=1e-4)
    assert detectable_difference(10, 0.1, alpha=0.05 / 3) < five
    assert detectable_difference(5, 0.1) < five
    assert t_test_power(5, five, 0.1, alpha=0.05 / 3) == pytest.approx(0.8, abs=1e-5)
    with pytest.raises(ValueError, match="at most alpha"):
        detectable_difference(5, 0.1, power=0.01)
