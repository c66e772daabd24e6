"""Rounding error is not signal: every test of :mod:`lit_grpo.lab.stats` reads a difference, variance
or residual within the rounding of its data as none (docs/methods.md, "What counts as zero").

The data below have no true effect: identical arms, one arm moved one unit in the last place (ULP), values
scattered a few ULPs around a constant, or constants 1e-16 of their size apart; what another summation order,
thread count or CPU leaves behind. No test may call that significant. Real effects, in turn, keep their
p-values whatever the units of the data (a power-of-two rescaling is exact, so the p-value may not move).
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from lit_grpo.lab import stats
from lit_grpo.lab.markdown import NO_WITHIN_VARIATION, STABLE_DIGITS, fmt, fmt_p
from lit_grpo.lab.stats import holm_adjust
from lit_grpo.lab.tables import Cell, anova_table, anova_tests, paired, pairwise

#: levels of the kind the reports hold: a float32 accuracy, round numbers, a large and a small scale
LEVELS = [0.3317500054836273, 0.5, 1.0, 2.0181, 37.5, 1e-3]
N = 10


def _ulps(x: float, k: int) -> float:
    """``x`` moved ``k`` ULPs (up for k > 0)."""
    for _ in range(abs(k)):
        x = float(np.nextafter(x, math.copysign(math.inf, k)))
    return x


def _nil(kind: str, c: float, seed: int) -> tuple[list[float], list[float]]:
    """Two arms of N values each with no true difference, around the level ``c``."""
    rng = np.random.default_rng(seed)
    noise = lambda: [_ulps(c, int(k)) for k in rng.integers(-2, 3, N)]  # noqa: E731
    if kind == "one arm one ULP up":
        return [c] * N, [_ulps(c, 1)] * N
    if kind == "one arm one ULP down":
        return [c] * N, [_ulps(c, -1)] * N
    if kind == "a few ULPs of noise":
        return noise(), noise()
    if kind == "noise and one arm one ULP up":
        a = noise()
        return a, [_ulps(x, 1) for x in a]
    if kind == "constants 1e-16 apart (relative)":
        return [c] * N, [c + 1e-16 * c] * N
    raise AssertionError(kind)


KINDS = ["one arm one ULP up", "one arm one ULP down", "a few ULPs of noise", "noise and one arm one ULP up",
         "constants 1e-16 apart (relative)"]  # fmt: skip


def _anova_ps(a: list[float], b: list[float]) -> list[float]:
    """Every term's p of arm x level, with a level factor that has no effect."""
    table = stats.two_way_anova(a + b, ["A"] * N + ["B"] * N, ["x", "y"] * N)
    return [table[k]["p"] for k in ("a", "b", "a:b")]


#: each test of stats.py as ``p-values of (arm a, arm b, level c)``
TESTS = {
    "welch_t_test": lambda a, b, c: [stats.welch_t_test(a, b)[2]],
    "paired_t_test": lambda a, b, c: [stats.paired_t_test(a, b)[2]],
    "one_sample_t_test": lambda a, b, c: [stats.one_sample_t_test(b, c)[2]],
    "wilcoxon_signed_rank_test (paired)": lambda a, b, c: [stats.wilcoxon_signed_rank_test(a, b)[1]],
    "wilcoxon_signed_rank_test (against mu)": lambda a, b, c: [stats.wilcoxon_signed_rank_test(b, mu=c)[1]],
    "paired_sign_flip_test": lambda a, b, c: [stats.paired_sign_flip_test(a, b)],
    "sign_flip_test": lambda a, b, c: [stats.sign_flip_test(b, c)],
    "permutation_test": lambda a, b, c: [stats.permutation_test(a, b)],
    "stratified_permutation_test": lambda a, b, c: [
        stats.stratified_permutation_test([(a[:5], b[:5]), (a[5:], b[5:])])
    ],
    "two_way_anova": lambda a, b, c: _anova_ps(a, b),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(TESTS))
def test_no_test_reads_rounding_noise_as_an_effect(name, kind):
    for i, c in enumerate(LEVELS):
        a, b = _nil(kind, c, seed=i)
        for p in TESTS[name](a, b, c):
            assert math.isnan(p) or p >= 0.05, f"{name}: p = {p} for {kind} at level {c}"


def test_a_constant_sample_has_no_spread_whatever_its_rounding():
    for i, c in enumerate(LEVELS):
        a, _ = _nil("a few ULPs of noise", c, seed=i)
        s = stats.summarize(a)
        assert s["sd"] == 0.0 and s["ci_low"] == s["ci_high"] == s["mean"], c
        assert stats.prompt_se(a) == 0.0
        r = stats.tost_test(a, target=c, margin=0.1)
        assert r["ci90_low"] == r["ci90_high"] and r["p"] == 0.0  # a constant on target: equivalent
    assert fmt(stats.summarize([0.3317500054836273, _ulps(0.3317500054836273, 1)] * 4)["sd"]) == "0.0000"


def test_differences_within_rounding_are_ties_and_zeros():
    c = 0.3317500054836273
    # one pair a ULP apart is a zero difference (dropped), two differences a ULP apart are a tie (midranks)
    a = [c, 0.5, 0.25, 0.75, 0.125]
    b = [_ulps(c, 1), 0.5 - 0.1, 0.25 - _ulps(0.1, 1), 0.75 + 0.3, 0.125 - 0.2]
    exact = stats.wilcoxon_signed_rank_test([0.1, 0.1, -0.3, 0.2])  # what these differences are
    assert stats.wilcoxon_signed_rank_test(a, b) == (exact[0], pytest.approx(exact[1]))
    assert stats.tied_differences(a, b)[0] == 0.0
    assert stats.mean_difference([c] * 3, [_ulps(c, 1)] * 3) == 0.0
    d = stats.tied_differences([c, c], [_ulps(c, -1), _ulps(c, 1)])
    assert d == [0.0, 0.0] and all(math.copysign(1.0, x) == 1.0 for x in d)  # +0.0: never "-0.0000"


def test_a_zero_residual_leaves_f_and_p_undefined_and_rounding_sized_terms_zero():
    """As sign_vs_drgrpo's starting policy: every run of a cell is the same policy (the policies differ, the
    arms do not), and one arm's values carry rounding noise."""
    levels = {"weak": 0.3317500054836273, "strong": 0.5634999871253967}
    y, arm, policy = [], [], []
    for p, v in levels.items():
        for a in ("Sign", "NormDrGRPO"):
            for seed in range(7):
                y.append(_ulps(v, seed % 3 - 1) if a == "Sign" else v)  # rounding noise in one arm
                arm.append(a)
                policy.append(p)
    table = stats.two_way_anova(y, arm, policy, blocks=[[i % 7 for i in range(len(y))]])
    assert table["residual"]["ss"] == 0.0
    assert table["a"]["ss"] == table["a:b"]["ss"] == 0.0
    assert table["b"]["ss"] == pytest.approx(28 * ((levels["strong"] - levels["weak"]) / 2) ** 2)  # policies
    for key in ("a", "b", "a:b", "residual"):
        assert math.isnan(table[key]["F"]) and math.isnan(table[key]["p"]), key


def test_a_real_residual_keeps_its_f_test_and_a_rounding_sized_term_is_zero():
    y = [4.1, 4.5, 5.2, 5.0, 6.3, 6.1, 3.9, 4.2, 4.4, 4.8, 4.6, 4.0]
    b = ["1e-4", "1e-4", "3e-4", "3e-4", "1e-3", "1e-3"] * 2
    same = stats.two_way_anova(y + y, ["A"] * 12 + ["B"] * 12, b + b)  # arm B repeats arm A exactly
    assert same["a"]["ss"] == same["a:b"]["ss"] == 0.0 and same["a"]["F"] == 0.0 and same["a"]["p"] == 1.0
    assert same["residual"]["ss"] > 0 and same["b"]["p"] < 0.05


@pytest.mark.parametrize("name", list(TESTS))
def test_p_values_do_not_depend_on_the_units(name):
    """A real effect stays one at any scale: the rule is relative to the data, never an absolute 1e-9."""
    a = [0.61, 0.58, 0.66, 0.55, 0.63, 0.60, 0.59, 0.64, 0.57, 0.62]
    b = [0.56, 0.52, 0.60, 0.54, 0.58, 0.51, 0.57, 0.55, 0.59, 0.53]
    c = 0.5
    for scale in (2.0**-40, 2.0**40):
        scaled = TESTS[name]([x * scale for x in a], [x * scale for x in b], c * scale)
        assert scaled == pytest.approx(TESTS[name](a, b, c), rel=1e-9), scale
    assert min(TESTS[name](a, b, c)) < 0.05 or name == "two_way_anova"  # the data hold an effect


def test_stratified_sign_flip_reads_differences_on_the_scale_of_their_values():
    c = 0.3317500054836273
    d = [[_ulps(c, 1) - c] * 5, [c - _ulps(c, -1)] * 5]  # one ULP each: rounding of values near 0.33
    assert stats.stratified_sign_flip_test(d, scale=c) == 1.0
    real = [[0.01, 0.02, 0.015, 0.03, 0.012], [0.02, 0.01, 0.025, 0.018, 0.011]]
    assert stats.stratified_sign_flip_test(real, scale=c) == stats.stratified_sign_flip_test(real) < 0.01


def _cell(setting: str, arm: str, values: list[float]) -> Cell:
    return Cell(setting, arm, values, 0, 0, list(range(len(values))))


def test_the_report_prints_an_undefined_f_and_p_as_no_variation_within_cells():
    weak, strong = 0.3317500054836273, 0.5634999871253967
    cell_list = [
        _cell(f"policy={p}", arm, [_ulps(v, k % 2) if arm == "Sign" else v for k in range(5)])
        for p, v in (("weak", weak), ("strong", strong))
        for arm in ("Sign", "NormDrGRPO")
    ]
    exp = SimpleNamespace(tests="arms")
    (r,) = anova_tests(exp, cell_list)
    assert math.isnan(r["p"])  # not a test of the family: Holm and BH leave it out
    rows = {row.split(" | ")[0].lstrip("| "): row for row in anova_table([r]) if row.startswith("| ")}
    for term in ("arm", "policy", "arm x policy (interaction)"):
        assert rows[term].split(" | ")[3:5] == [NO_WITHIN_VARIATION] * 2, rows[term]
    assert rows["residual"] == "| residual | 0.0000 | 12 | n/a | n/a | — | — |"  # 20 runs, 8 parameters (seed blocks)
    assert holm_adjust([r["p"], 0.01]) == [pytest.approx(math.nan, nan_ok=True), 0.01]


def test_paired_rows_count_a_tie_for_neither_arm():
    c = 0.3317500054836273
    r = paired([c, c, 0.5, 0.25], [_ulps(c, -1), _ulps(c, 1), 0.25, 0.5])
    assert r["ahead"] == 1.0 and r["diff"] == 0.0  # the two ties count for neither arm; +0.25 - 0.25 is 0
    flat = pairwise([c] * 3, [_ulps(c, 1)] * 3)
    assert flat["diff"] == 0.0 and math.isnan(flat["p_welch"]) and flat["p_perm"] == 1.0


def test_printed_numbers_do_not_tip_at_a_half_way_point():
    assert fmt(0.53125) == fmt(_ulps(0.53125, 1)) == fmt(_ulps(0.53125, -1)) == "0.5312"
    assert fmt_p(0.03125) == fmt_p(_ulps(0.03125, 1)) == "0.0312"


def test_the_methods_doc_states_the_rule_with_its_numbers():
    from pathlib import Path

    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "methods.md").read_text().split())
    assert f"= {stats.rounding_tolerance(0.5, 84):.1e}" in doc  # 84 values near 0.5
    assert f"{stats.ROUNDING_ULPS}·n·ε·M" in doc and f"rounded to {STABLE_DIGITS} significant digits" in doc
    assert NO_WITHIN_VARIATION in doc


def test_zero_spread_with_a_nonzero_mean_has_no_t_test_p():
    """Two seeds one prompt in 1000 apart: the differences agree to rounding, so their sd is 0 and the t statistic
    mean / 0 measures nothing (no digit of the spread is measured). The t-tests give no p; the exact tests do, and
    the report's family reads those (0.5 for two pairs), never a p of 0 at any n."""
    a, b = [0.501, 0.602], [0.500, 0.601]
    assert all(math.isnan(x) for x in stats.paired_t_test(a, b))
    assert all(math.isnan(x) for x in stats.one_sample_t_test([3.0, 3.0, 3.0], 1.0))
    assert all(math.isnan(x) for x in stats.welch_t_test([2.0, 2.0], [1.0, 1.0]))
    row = paired(a, b)
    assert math.isnan(row["p_t"]) and row["p"] == row["p_flip"] == 0.5 and row["diff"] == pytest.approx(0.001)
    assert pairwise([2.0, 2.0], [1.0, 1.0])["p"] == stats.permutation_test([2.0, 2.0], [1.0, 1.0]) == 1 / 3
    assert holm_adjust([row["p"], 0.01]) == [0.5, 0.02]


def _one_ulp_differences(c: float, n: int) -> list[float]:
    """Paired differences of two arms with no true difference: one arm moved one or two ULPs up, pair by pair."""
    return [_ulps(c, 1 + i % 2) - c for i in range(n)]


@pytest.mark.parametrize("c", LEVELS)
def test_differences_passed_in_are_read_on_the_scale_of_their_arms(c):
    """Differences a caller computed are as small as rounding makes them; only the arms' magnitude says so."""
    d = _one_ulp_differences(c, 10)
    assert math.isnan(stats.one_sample_t_test(d, scale=c)[2])  # every difference within rounding: no spread
    assert stats.sign_flip_test(d[:8], scale=c) == 1.0
    real = [0.05, 0.06, 0.04, 0.07, 0.05, 0.08, 0.03, 0.06]
    assert stats.one_sample_t_test(real, scale=c) == stats.one_sample_t_test(real)
    assert stats.sign_flip_test(real, scale=c) == stats.sign_flip_test(real) < 0.01
