"""The numbers of a report: reductions, derived accuracies, one-sample tests, bands and tables."""

import math

import pytest

from lit_grpo.lab.collect import chance_corrected, guess_share, read_scalars, reduce_series
from lit_grpo.lab.figures import curve_band, mean_band, smooth
from lit_grpo.lab.markdown import fmt, fmt_p
from lit_grpo.lab.stats import one_sample_t_test, sign_flip_test, summarize, welch_t_test
from lit_grpo.lab.tables import Cell, pairwise, summary_table

SERIES = [(0, 1.0), (5, 3.0), (9, 2.0), (12, 6.0)]


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("last", 6.0),
        ("first", 1.0),
        ("delta", 5.0),
        ("mean", 3.0),
        ("min", 1.0),
        ("max", 6.0),
        ("tail", 4.0),
    ],
)
def test_reductions(how, expected):
    assert reduce_series(SERIES, how, tail=0.5) == expected


def test_reductions_of_nothing_are_nan_and_tail_keeps_at_least_one():
    assert math.isnan(reduce_series([], "mean"))
    assert reduce_series(SERIES, "tail", tail=0.01) == 6.0
    with pytest.raises(ValueError, match="reduce='median' is not one of"):
        reduce_series(SERIES, "median")


def test_chance_corrected_accuracy_and_guess_share():
    # k = 4: acc 0.25 is pure guessing (s = 0, every correct answer a guess); acc 1 is full skill
    assert chance_corrected(0.25, 0.25) == 0.0 and chance_corrected(1.0, 0.25) == 1.0
    assert chance_corrected(0.625, 0.25) == pytest.approx(0.5)
    assert guess_share(0.25, 0.25) == pytest.approx(1.0)
    assert guess_share(0.625, 0.25) == pytest.approx(0.25 * 0.5 / 0.625)  # 0.2
    assert math.isnan(guess_share(0.0, 0.25))


def test_read_scalars_keeps_the_last_value_of_a_repeated_step(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step, value in [(0, 0.5), (1, 0.25), (1, 0.75), (3, 1.0)]:
        writer.add_scalar("val/accuracy", value, step)
    writer.close()
    assert read_scalars(tmp_path) == {"val/accuracy": [(0, 0.5), (1, 0.75), (3, 1.0)]}


def test_one_sample_t_test_known_values():
    # scipy.stats.ttest_1samp([1, 2, 3, 4, 5], 2): t = 1.414214, p = 0.230200
    t, df, p = one_sample_t_test([1, 2, 3, 4, 5], 2.0)
    assert (t, df) == (pytest.approx(math.sqrt(2)), 4.0) and p == pytest.approx(0.230200, abs=1e-6)
    assert all(math.isnan(x) for x in one_sample_t_test([3, 3, 3], 3.0))  # no spread, no difference
    # no spread, a difference: mean / 0 measures nothing, so no t and no p (the sign flip's p is read instead)
    assert all(math.isnan(x) for x in one_sample_t_test([3, 3, 3], 1.0))


def test_sign_flip_test_exact_and_monte_carlo():
    assert sign_flip_test([1.0, 2.0, 3.0]) == 0.25  # only all-plus and all-minus reach |mean| = 2
    assert sign_flip_test([1.0, -1.0]) == 1.0
    assert sign_flip_test([2.0, 3.0], mu=2.0) == 1.0  # deviations (0, 1): every pattern reaches |mean| 0.5
    big = [1.0] * 20  # 2^20 patterns: Monte Carlo, p = (1 + hits) / (1 + n)
    assert sign_flip_test(big, n_resamples=999) == pytest.approx(1 / 1000, abs=2 / 1000)
    with pytest.raises(ValueError, match="NaN"):
        sign_flip_test([1.0, math.nan])


def test_smooth_and_bands():
    assert smooth([(0, 1.0), (1, 3.0), (2, 5.0)], 2) == [(0, 1.0), (1, 2.0), (2, 4.0)]
    mean, lo, hi, n = mean_band([1.0, 2.0, 3.0, math.nan])
    s = summarize([1.0, 2.0, 3.0])
    assert (mean, n) == (2.0, 3) and (lo, hi) == (pytest.approx(s["ci_low"]), pytest.approx(s["ci_high"]))
    band = curve_band([[(0, 1.0), (1, 2.0)], [(0, 3.0)]])
    assert [(step, m, count) for step, m, _, _, count in band] == [(0, 2.0, 2), (1, 2.0, 1)]


def test_pairwise_matches_the_statistics_module():
    a, b = [0.5, 0.6, 0.7], [0.1, 0.2, 0.4, 0.3]
    r = pairwise(a, b)
    assert r["diff"] == pytest.approx(0.6 - 0.25)
    assert (r["t"], r["df"], r["p_welch"]) == pytest.approx(welch_t_test(a, b))
    assert r["p_perm"] == pytest.approx(2 / 35)  # only the observed split and its mirror are as extreme
    assert math.isnan(pairwise([1.0], [2.0, 3.0])["p_welch"])


def test_summary_table_row():
    values = [0.2, 0.4, 0.6, 0.9]
    (header, _, row, empty) = summary_table([Cell("lr=1", "Sign", values, 1, 0), Cell("lr=1", "X", [], 2, 0)])
    s = summarize(values)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:5] == ["lr=1", "Sign", "4", fmt(s["mean"]), fmt(s["sd"])]
    assert cells[5] == f"[{fmt(s['ci_low'])}, {fmt(s['ci_high'])}]" and cells[-1] == "1"
    assert "n/a" in empty and empty.strip("| ").endswith("2")
    assert "mean" in header


def test_formatting():
    assert fmt(0.123456) == "0.1235" and fmt(float("nan")) == "n/a" and fmt(2e-6) == "2.000e-06"
    assert fmt_p(3e-5) == "< 1e-4" and fmt_p(0.04321) == "0.0432"


def test_settings_are_compared_one_sweep_axis_apart():
    from types import SimpleNamespace

    from lit_grpo.lab.tables import _pairs

    cell_list = [Cell(s, "GRPO", [1.0], 0, 0) for s in ("G=2,P=1", "G=2,P=16", "G=8,P=1", "G=8,P=16")]
    pairs = {(a.setting, b.setting) for a, b in _pairs(SimpleNamespace(tests="settings", reference=None), cell_list)}
    assert pairs == {
        ("G=2,P=1", "G=2,P=16"),
        ("G=2,P=1", "G=8,P=1"),
        ("G=2,P=16", "G=8,P=16"),
        ("G=8,P=1", "G=8,P=16"),
    }
    assert (
        _pairs(SimpleNamespace(tests="arms", reference=None), cell_list) == []
    )  # one arm: nothing to compare within a setting


def test_arms_are_pooled_over_settings_sharing_an_axis_value_and_over_all():
    from types import SimpleNamespace

    from lit_grpo.lab.stats import stratified_permutation_test
    from lit_grpo.lab.tables import pooled_table, pooled_tests

    values = {
        ("lr=1,policy=weak", "A"): [0.5, 0.6], ("lr=1,policy=weak", "B"): [0.4, 0.45],
        ("lr=1,policy=strong", "A"): [0.8, 0.85], ("lr=1,policy=strong", "B"): [0.7, 0.7],
        ("lr=3,policy=weak", "A"): [0.1, 0.2], ("lr=3,policy=weak", "B"): [0.3, 0.3],
        ("lr=3,policy=strong", "A"): [0.2], ("lr=3,policy=strong", "B"): [],  # B failed: not a stratum
    }  # fmt: skip
    cell_list = [Cell(s, arm, v, 0, 0) for (s, arm), v in values.items()]
    exp = SimpleNamespace(tests="arms", reference=None)
    rows = pooled_table(pooled_tests(exp, cell_list))[2:]
    names = [r.split(" | ")[0].lstrip("| ") for r in rows]
    assert names == ["lr=1", "policy=weak", "all settings"]  # lr=3 and policy=strong: one stratum left
    lr1 = rows[0].strip("| ").split(" | ")
    assert lr1[1:5] == ["A", "B", "2", "8"]
    assert float(lr1[5]) == pytest.approx(((0.55 - 0.425) + (0.825 - 0.7)) / 2, abs=1e-4)
    assert lr1[6] == "2 of 2"
    strata = [(values["lr=1,policy=weak", "A"], values["lr=1,policy=weak", "B"]),
              (values["lr=1,policy=strong", "A"], values["lr=1,policy=strong", "B"])]  # fmt: skip
    assert lr1[7] == "stratified permutation"  # no seeds to pair the values by
    assert lr1[8] == fmt_p(stratified_permutation_test(strata))
    assert pooled_tests(SimpleNamespace(tests="settings", reference=None), cell_list) == []
    assert pooled_tests(exp, [c for c in cell_list if c.setting == "lr=1,policy=weak"]) == []
    # with a reference arm only its pairs are made
    third = [Cell(s, "C", [0.1, 0.2], 0, 0) for s in dict.fromkeys(c.setting for c in cell_list)]
    ref = pooled_tests(SimpleNamespace(tests="arms", reference="B"), cell_list + third)
    assert {(r["a"], r["b"]) for r in ref} == {("B", "A"), ("B", "C")}


def test_paired_cells_use_paired_tests_and_pool_by_sign_flips():
    from types import SimpleNamespace

    from lit_grpo.lab.stats import paired_t_test, sign_flip_test
    from lit_grpo.lab.tables import compare_cells, pooled_tests, stratified_sign_flip_test

    a = Cell("lr=1", "A", [0.5, 0.6, 0.7, 0.65], 0, 0, seeds=[0, 1, 2, 3])
    b = Cell("lr=1", "B", [0.45, 0.58, 0.61, 0.66, 0.2], 0, 0, seeds=[0, 1, 2, 3, 4])  # seed 4: A failed
    r = compare_cells(a, b)
    assert r["paired"] == 1.0 and r["n"] == 4 and r["ahead"] == 3
    assert (r["t"], r["df"], r["p_t"]) == pytest.approx(paired_t_test(a.values, [0.45, 0.58, 0.61, 0.66]))
    assert r["p_flip"] == pytest.approx(sign_flip_test([0.05, 0.02, 0.09, -0.01]))
    unpaired = compare_cells(a, Cell("lr=1", "C", [0.1, 0.2], 0, 0, seeds=[7, 8]))
    assert unpaired["paired"] == 0.0 and not math.isnan(unpaired["p_welch"])
    # pooled: one difference per stratum and seed, every sign flipped independently
    assert stratified_sign_flip_test([[1.0], [3.0]]) == pytest.approx(0.5)  # statistics 2, 1, -1, -2
    assert stratified_sign_flip_test([[0.1, 0.2, 0.3]]) == pytest.approx(sign_flip_test([0.1, 0.2, 0.3]))
    a2 = Cell("lr=3", "A", [0.2, 0.3], 0, 0, seeds=[0, 1])
    b2 = Cell("lr=3", "B", [0.1, 0.1], 0, 0, seeds=[0, 1])
    (row,) = pooled_tests(SimpleNamespace(tests="arms", reference=None), [a, b, a2, b2])
    assert row["paired"] and row["p"] == pytest.approx(
        stratified_sign_flip_test([[0.05, 0.02, 0.09, -0.01], [0.1, 0.2]])
    )


def test_family_is_adjusted_together_and_anova_tests_the_interaction():
    from types import SimpleNamespace

    from lit_grpo.lab.collect import RunRecord
    from lit_grpo.lab.grid import Run
    from lit_grpo.lab.spec import Arm, Metric
    from lit_grpo.lab.stats import benjamini_hochberg_adjust, holm_adjust, two_way_anova
    from lit_grpo.lab.tables import analyse, family_section

    primary = Metric("test/accuracy", primary=True)
    other = Metric("val/accuracy")
    values = {("1", "A"): [0.5, 0.6, 0.55], ("1", "B"): [0.4, 0.5, 0.5], ("3", "A"): [0.2, 0.1, 0.3], ("3", "B"): [0.4, 0.45, 0.5]}
    records = [
        RunRecord(Run(arm, (("lr", lr),), seed, (), None), "done", values={primary.key: v, other.key: v})
        for (lr, arm), vs in values.items()
        for seed, v in enumerate(vs)
    ]
    exp = SimpleNamespace(arms=(Arm("A"), Arm("B")), metrics=(primary, other), family_metrics=(primary,),
                          tests="arms", reference=None)  # fmt: skip
    analysis = analyse(exp, records)
    first, second = analysis.metrics
    assert first.in_family and not second.in_family
    tests = first.family_tests()
    assert len(tests) == 2 + 1 + 1  # a pair per setting, the pool over both, the interaction
    ps = [t["p"] for t in tests]
    assert [t["holm"] for t in tests] == pytest.approx(holm_adjust(ps))
    assert [t["bh"] for t in tests] == pytest.approx(benjamini_hochberg_adjust(ps))
    assert all("holm" not in t for t in second.family_tests())
    (anova,) = first.anova
    want = two_way_anova([v for vs in values.values() for v in vs], [a for (_, a), vs in values.items() for _ in vs],
                         [lr for (lr, _), vs in values.items() for _ in vs], [[s for vs in values.values() for s in range(len(vs))]])  # fmt: skip
    assert anova["axis"] == "lr" and anova["blocks"] == ["seed"] and anova["p"] == pytest.approx(want["a:b"]["p"])
    assert "4 tests on the metrics marked `primary`" in family_section(SimpleNamespace(metrics=exp.metrics, reference=None), analysis)[0]


def test_minus_reports_a_difference_of_two_logged_metrics():
    from lit_grpo.lab.collect import metric_value
    from lit_grpo.lab.spec import Metric

    scalars = {"test/pass@1": [(5, 0.4)], "test/before/pass@1": [(0, 0.15)]}
    m = Metric("test/pass@1", minus="test/before/pass@1")
    assert metric_value(scalars, m) == pytest.approx(0.25)
    assert m.key == "test/pass@1 − test/before/pass@1 (last)"
