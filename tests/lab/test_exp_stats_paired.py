"""Paired and equivalence tests, multiplicity adjustments, the two-way analysis of variance and the
prompt-sampling error, against hand values and brute-force enumeration."""

import itertools
import math

import pytest
import torch

from lit_grpo.lab.stats import (
    benjamini_hochberg_adjust,
    binomial_se,
    f_sf,
    holm_adjust,
    midranks,
    one_sample_t_test,
    paired_sign_flip_test,
    paired_t_test,
    prompt_se,
    t_sf,
    tost_test,
    two_way_anova,
    wilcoxon_signed_rank_test,
)


def test_paired_t_is_the_one_sample_t_of_the_differences():
    a, b = [3.0, 5.0, 6.0, 8.0, 9.0], [2.0, 3.0, 3.0, 4.0, 4.0]  # differences 1..5
    t, df, p = paired_t_test(a, b)
    assert (t, df) == (pytest.approx(3 / (math.sqrt(2.5) / math.sqrt(5))), 4.0)
    assert p == pytest.approx(0.013236, abs=1e-6)  # t = 4.2426 on 4 df
    assert (t, df, p) == one_sample_t_test([1.0, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="same length"):
        paired_t_test([1.0, 2.0], [1.0, 2.0, 3.0])


def test_paired_sign_flip_by_enumeration():
    a = [0.52, 0.61, 0.47, 0.58, 0.66, 0.49]
    b = [0.50, 0.55, 0.49, 0.51, 0.60, 0.45]
    d = [x - y for x, y in zip(a, b, strict=True)]
    observed = abs(sum(d)) / len(d)
    patterns = list(itertools.product([1, -1], repeat=len(d)))
    want = sum(abs(sum(s * x for s, x in zip(p, d, strict=True))) / len(d) >= observed - 1e-12 for p in patterns)
    assert paired_sign_flip_test(a, b) == pytest.approx(want / len(patterns))
    assert paired_sign_flip_test([1.0] * 10, [0.0] * 10) == pytest.approx(2 / 1024)  # the floor at n = 10


def _wilcoxon_brute(d):
    d = [x for x in d if x != 0]
    ranks = midranks(torch.tensor([abs(x) for x in d], dtype=torch.float64)).tolist()
    w = sum(r for r, x in zip(ranks, d, strict=True) if x > 0)
    centre = sum(ranks) / 2
    dist = [sum(r for r, s in zip(ranks, p, strict=True) if s) for p in itertools.product([0, 1], repeat=len(d))]
    return w, sum(abs(v - centre) >= abs(w - centre) - 1e-12 for v in dist) / len(dist)


def test_wilcoxon_hand_values():
    assert wilcoxon_signed_rank_test([1.0, 2, 3, 4, 5]) == (15.0, pytest.approx(2 / 32))
    # W+ = 13: the sign patterns with W+ >= 13 or <= 2 are 3 + 3 of 32
    assert wilcoxon_signed_rank_test([1.0, -2, 3, 4, 5]) == (13.0, pytest.approx(6 / 32))
    assert wilcoxon_signed_rank_test([1.0, 2, 0, 3], [1.0, 2, 0, 3]) == (pytest.approx(math.nan, nan_ok=True), 1.0)


@pytest.mark.parametrize(
    "d",
    [[0.1, -0.3, 0.2, 0.5, 0.4, -0.05, 0.7], [1.0, 1.0, 2.0, -2.0, 3.0, 0.0], [0.2, 0.2, 0.2, -0.2]],
)
def test_wilcoxon_exact_with_ties_and_zeros_matches_enumeration(d):
    w, p = wilcoxon_signed_rank_test(d)
    assert (w, p) == (pytest.approx(_wilcoxon_brute(d)[0]), pytest.approx(_wilcoxon_brute(d)[1]))
    assert wilcoxon_signed_rank_test([x + 1 for x in d], mu=1.0)[1] == pytest.approx(p)


def test_wilcoxon_normal_approximation_for_large_n():
    gen = torch.Generator().manual_seed(0)
    d = (torch.randn(40, generator=gen) + 0.6).tolist()
    w, p = wilcoxon_signed_rank_test(d)
    n = 40
    z = (w - n * (n + 1) / 4) / math.sqrt(n * (n + 1) * (2 * n + 1) / 24)  # no ties in Gaussian draws
    assert p == pytest.approx(math.erfc(abs(z) / math.sqrt(2)))


def test_midranks():
    assert midranks(torch.tensor([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]


def test_holm_and_bh_known_values():
    # R: p.adjust(c(0.01, 0.02, 0.03, 0.04, 0.05), "holm") and "BH"
    p = [0.01, 0.02, 0.03, 0.04, 0.05]
    assert holm_adjust(p) == pytest.approx([0.05, 0.08, 0.09, 0.09, 0.09])
    assert benjamini_hochberg_adjust(p) == pytest.approx([0.05] * 5)
    # unsorted input, a NaN (a test that could not be made) kept out of m, and the cap at 1
    p = [0.04, math.nan, 0.001, 0.5, 0.03]
    holm = holm_adjust(p)
    assert math.isnan(holm[1])
    assert [holm[i] for i in (0, 2, 3, 4)] == pytest.approx([0.09, 0.004, 0.5, 0.09])
    bh = benjamini_hochberg_adjust(p)
    assert [bh[i] for i in (0, 2, 3, 4)] == pytest.approx([0.04 * 4 / 3, 0.004, 0.5, 0.04 * 4 / 3])
    assert holm_adjust([0.3, 0.6]) == [0.6, 0.6] and holm_adjust([]) == []
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm_adjust([1.5])


def test_f_sf_against_t_and_tables():
    for t, df in [(2.0, 5), (0.7, 12), (3.3, 3)]:
        assert f_sf(t * t, 1, df) == pytest.approx(2 * t_sf(t, df), rel=1e-10)
    assert f_sf(3.8853, 2, 12) == pytest.approx(0.05, abs=1e-5)  # upper 5% points of F tables
    assert f_sf(3.0984, 3, 20) == pytest.approx(0.05, abs=1e-5)
    assert f_sf(0.0, 2, 5) == 1.0


def _classical_anova(y, a, b):
    """Balanced two-way ANOVA by the textbook sums of squares (independent of the regression code)."""
    n = len(y)
    grand = sum(y) / n
    la, lb = sorted(set(a)), sorted(set(b))

    def mean(xs):
        return sum(xs) / len(xs)

    ma = {u: mean([v for v, x in zip(y, a, strict=True) if x == u]) for u in la}
    mb = {u: mean([v for v, x in zip(y, b, strict=True) if x == u]) for u in lb}
    cell = {(u, w): mean([v for v, x, z in zip(y, a, b, strict=True) if (x, z) == (u, w)]) for u in la for w in lb}
    ss_a = sum((ma[x] - grand) ** 2 for x in a)
    ss_b = sum((mb[x] - grand) ** 2 for x in b)
    ss_cells = sum((cell[x, z] - grand) ** 2 for x, z in zip(a, b, strict=True))
    ss_res = sum((v - cell[x, z]) ** 2 for v, x, z in zip(y, a, b, strict=True))
    return ss_a, ss_b, ss_cells - ss_a - ss_b, ss_res


def test_two_way_anova_balanced_matches_textbook_sums_of_squares():
    y = [4.1, 4.5, 5.2, 5.0, 6.3, 6.1, 3.9, 4.2, 4.4, 4.8, 4.6, 4.0]
    a = ["Sign"] * 6 + ["GRPO"] * 6
    b = ["1e-4", "1e-4", "3e-4", "3e-4", "1e-3", "1e-3"] * 2
    out = two_way_anova(y, a, b)
    ss_a, ss_b, ss_ab, ss_res = _classical_anova(y, a, b)
    assert [out[k]["ss"] for k in ("a", "b", "a:b", "residual")] == pytest.approx([ss_a, ss_b, ss_ab, ss_res])
    assert [out[k]["df"] for k in ("a", "b", "a:b", "residual")] == [1, 2, 2, 6]
    f_ab = (ss_ab / 2) / (ss_res / 6)
    assert out["a:b"]["F"] == pytest.approx(f_ab) and out["a:b"]["p"] == pytest.approx(f_sf(f_ab, 2, 6))
    assert out["a:b"]["p"] < 0.01  # Sign rises with lr, GRPO does not: an interaction


def test_two_way_anova_block_absorbs_seed_offsets_and_unbalanced_designs_work():
    y = [4.1, 4.5, 5.2, 5.0, 6.3, 6.1, 3.9, 4.2, 4.4, 4.8, 4.6, 4.0]
    a = ["Sign"] * 6 + ["GRPO"] * 6
    b = ["1e-4", "1e-4", "3e-4", "3e-4", "1e-3", "1e-3"] * 2
    seeds = [0, 1] * 6
    offset = {0: 0.0, 1: 0.8}
    shifted = [v + offset[s] for v, s in zip(y, seeds, strict=True)]
    with_block = two_way_anova(shifted, a, b, blocks=[seeds])
    plain = two_way_anova(y, a, b, blocks=[seeds])
    for key in ("a", "b", "a:b", "residual"):
        assert with_block[key]["ss"] == pytest.approx(plain[key]["ss"])
    assert with_block["residual"]["df"] == 5  # one degree of freedom to the seed
    # unbalanced: drop a run; the interaction test is still the comparison of the two models
    out = two_way_anova(y[1:], a[1:], b[1:])
    assert out["residual"]["df"] == 5 and 0 <= out["a:b"]["p"] <= 1
    with pytest.raises(ValueError, match="factor b has"):
        two_way_anova(y, a, b[:-1])


def test_tost_equivalence():
    r = tost_test([1.9, 2.1, 2.0, 2.05, 1.95], target=2.0, margin=0.5)
    se = math.sqrt(0.00625) / math.sqrt(5)  # sd of the values is sqrt(0.00625)
    assert r["p"] == pytest.approx(t_sf(0.5 / se, 4)) and r["p"] < 1e-4
    assert r["ci90_low"] > 1.5 and r["ci90_high"] < 2.5
    # a wide spread cannot show equivalence although the mean is on target
    wide = tost_test([1.0, 3.0, 2.0, 1.2, 2.8], target=2.0, margin=0.5)
    assert wide["p"] > 0.05 and (wide["ci90_low"] < 1.5 or wide["ci90_high"] > 2.5)
    # p < 0.05 exactly when the 90% interval lies inside the margin
    for values in ([2.3, 2.5, 2.4, 2.6], [2.1, 2.2, 2.3, 2.35], [1.7, 1.6, 1.8, 1.75]):
        r = tost_test(values, 2.0, 0.5)
        assert (r["p"] < 0.05) == (1.5 < r["ci90_low"] and r["ci90_high"] < 2.5)
    with pytest.raises(ValueError, match="margin"):
        tost_test([1.0, 2.0], 2.0, 0.0)


def test_prompt_sampling_errors():
    assert binomial_se(0.5, 200) == pytest.approx(0.0353553, abs=1e-7)
    assert binomial_se(0.0, 1000) == 0.0 and math.isnan(binomial_se(1.2, 10))
    assert prompt_se([1.0, 0.0, 1.0, 0.0]) == pytest.approx(math.sqrt(1 / 3) / 2)
    with pytest.raises(ValueError, match="n_prompts"):
        binomial_se(0.5, 0)
