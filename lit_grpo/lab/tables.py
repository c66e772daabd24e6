"""The numbers of a report: per-cell summaries over seeds, paired and unpaired tests between arms (or
settings), pooled tests over settings, the two-way analysis of arm x sweep axis, one-sample and
equivalence tests, and the multiplicity adjustment over the report's family of tests, as markdown.

Everything is computed first (:func:`analyse`), then the family's p-values are adjusted together
(Holm, Benjamini-Hochberg), then each metric's section is written (:func:`metric_section`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lit_grpo.lab.collect import RunRecord, finished, settings_of
from lit_grpo.lab.compute import curve_crossing
from lit_grpo.lab.markdown import NO_WITHIN_VARIATION, fmt, fmt_df, fmt_p, md_head, md_row
from lit_grpo.lab.pairing import arm_pairs, cell_pairs
from lit_grpo.lab.spec import Experiment, Metric
from lit_grpo.lab.stats import (
    benjamini_hochberg_adjust,
    binomial_se,
    holm_adjust,
    mean_difference,
    one_sample_t_test,
    paired,
    pairwise,
    sign_flip_test,
    snap,
    stratified_permutation_test,
    stratified_sign_flip_test,
    summarize,
    tied_differences,
    tost_test,
    two_way_anova,
    zero_tolerance,
)

#: Fewest runs per cell for which the report shows a percentile-bootstrap interval of the IQM. Below it
#: such intervals under-cover (bench/bootstrap_coverage.py: about 0.91 at n = 5 to 7 for a nominal 0.95).
MIN_BOOTSTRAP_N = 10
#: Significance level the report's adjusted p-values are read against.
ALPHA = 0.05


@dataclass
class Cell:
    """The per-seed values of one metric for one setting x arm."""

    setting: str
    arm: str
    values: list[float]  # finite values of finished runs, in seed order
    failed: int  # runs that crashed or never finished
    missing: int  # finished runs that did not log the metric
    seeds: list[int] = field(default_factory=list)  # the seed of each value
    se: list[float] = field(default_factory=list)  # finite per-run prompt-sampling SEs
    chosen: str = ""  # the value the selection stage chose for this arm, e.g. "lr=1e-4"


def cells(exp: Experiment, records: list[RunRecord], metric: Metric) -> list[Cell]:
    out = []
    for setting in settings_of(records):
        for arm in exp.arms:
            rs = [r for r in records if r.run.setting_label == setting and r.run.arm == arm.label]
            done = finished(records, setting, arm.label)
            kept = [r for r in done if math.isfinite(r.values.get(metric.key, math.nan))]
            se = [r.se.get(metric.key, math.nan) for r in kept]
            chosen = ",".join(f"{a}={lbl}" for a, lbl in rs[0].run.chosen) if rs and rs[0].run.chosen else ""
            values, seeds = [r.values[metric.key] for r in kept], [r.run.seed for r in kept]
            failed, missing = sum(r.status != "done" for r in rs), len(done) - len(kept)
            out.append(
                Cell(
                    setting,
                    arm.label,
                    values,
                    failed,
                    missing,
                    seeds,
                    [s for s in se if math.isfinite(s)],
                    chosen,
                )
            )
    return out


# ---- the tests ------------------------------------------------------------------------------------


def prompt_sampling_se(metric: Metric, cell: Cell) -> float:
    """The prompt-sampling standard error of one run's value: the root mean square of the runs' logged
    SEs (``metric.se``), or the binomial SE of the cell's mean accuracy over ``metric.prompts``."""
    if cell.se:
        return math.sqrt(sum(s * s for s in cell.se) / len(cell.se))
    if metric.prompts is None or not cell.values:
        return math.nan
    mean = sum(cell.values) / len(cell.values)
    if metric.transform == "chance_corrected":  # s = (acc - c) / (1 - c): acc = c + s (1 - c)
        c = metric.chance
        return binomial_se(c + mean * (1 - c), metric.prompts) / (1 - c)
    if metric.transform != "none":
        return math.nan
    return binomial_se(mean, metric.prompts)


def paired_values(a: Cell, b: Cell) -> tuple[list[float], list[float]]:
    """The values of the seeds both cells finished, in seed order (runs of one seed share the initial
    weights, the prompts and the per-step sampling seeds where :mod:`lit_grpo.lab.pairing` says
    so); nothing when a cell does not know its seeds."""
    if len(a.seeds) != len(a.values) or len(b.seeds) != len(b.values):
        return [], []
    vb = dict(zip(b.seeds, b.values, strict=True))
    common = [s for s in a.seeds if s in vb]
    va = dict(zip(a.seeds, a.values, strict=True))
    return [va[s] for s in common], [vb[s] for s in common]


def _pairs(exp: Experiment, cell_list: list[Cell]) -> list[tuple[Cell, Cell]]:
    """The pairs of cells :func:`~lit_grpo.lab.pairing.cell_pairs` compares."""
    by_key = {(c.arm, c.setting): c for c in cell_list}
    return [(by_key[a], by_key[b]) for a, b in cell_pairs(exp, list(by_key))]


def compare_cells(a: Cell, b: Cell) -> dict[str, float]:
    """Paired tests when the cells share at least two seeds, unpaired ones otherwise."""
    pa, pb = paired_values(a, b)
    if len(pa) >= 2:
        return {"paired": 1.0, **paired(pa, pb)}
    return {"paired": 0.0, "n": math.nan, **pairwise(a.values, b.values)}


def _pools(settings: list[str]) -> dict[str, list[str]]:
    """Groups of two or more settings to pool: those sharing one sweep axis value (``lr=1e-4``: every
    setting at that learning rate), then all settings."""
    pools: dict[str, list[str]] = {}
    for axis in range(len(settings[0].split(","))):  # axis by axis, values in sweep order
        for setting in settings:
            pools.setdefault(setting.split(",")[axis], []).append(setting)
    pools = {name: group for name, group in pools.items() if 1 < len(group) < len(settings)}
    if len(settings) > 1:
        pools["all settings"] = settings
    return pools


def pooled_tests(exp: Experiment, cell_list: list[Cell]) -> list[dict]:
    """Each pair of arms over several settings at once (a swept experiment with ``tests: arms | both``):
    the mean over settings of the per-setting difference, the settings where A is ahead, and the
    p-value: a stratified sign-flip test of the paired differences when every stratum pairs seeds,
    else the stratified permutation test (labels shuffled within each setting)."""
    settings = list(dict.fromkeys(c.setting for c in cell_list))
    if exp.tests not in ("arms", "both") or len(settings) < 2:
        return []
    by_key = {(c.setting, c.arm): c for c in cell_list}
    arms = list(dict.fromkeys(c.arm for c in cell_list))
    out = []
    for a, b in arm_pairs(exp, arms):
        for name, group in _pools(settings).items():
            cells_ = [
                (by_key[s, a], by_key[s, b]) for s in group if by_key[s, a].values and by_key[s, b].values
            ]
            if len(cells_) < 2:
                continue
            matched = [paired_values(x, y) for x, y in cells_]
            is_paired = all(len(x) >= 2 for x, _ in matched)
            strata = matched if is_paired else [(x.values, y.values) for x, y in cells_]
            diffs = [mean_difference(x, y) for x, y in strata]  # 0 within rounding: neither arm ahead
            tol = zero_tolerance(*(v for pair in strata for v in pair))
            if is_paired:
                scale = max(abs(v) for x, y in matched for v in x + y)
                p = stratified_sign_flip_test([tied_differences(x, y) for x, y in matched], scale=scale)
            else:
                p = stratified_permutation_test(strata)
            out.append(
                {
                    "pool": name, "a": a, "b": b, "settings": len(cells_),
                    "runs": sum(len(x.values) + len(y.values) for x, y in cells_),
                    "diff": snap(sum(diffs) / len(diffs), tol),
                    "ahead": sum(d > 0 for d in diffs),
                    "paired": is_paired, "p": p,
                }
            )  # fmt: skip
    return out


def anova_tests(exp: Experiment, cell_list: list[Cell]) -> list[dict]:
    """Per sweep axis with two or more values: a two-way ANOVA of the per-run values by arm x axis value
    (interaction included), with the other axes' setting and, when every cell has the same seeds, the
    seed as additive blocks. Empty without a sweep or with one arm."""
    arms = list(dict.fromkeys(c.arm for c in cell_list if c.values))
    settings = list(dict.fromkeys(c.setting for c in cell_list))
    if len(arms) < 2 or settings == ["default"] or len(settings) < 2:
        return []
    names = [part.split("=", 1)[0] for part in settings[0].split(",")]
    rows = [(c, v, s) for c in cell_list for v, s in zip(c.values, c.seeds, strict=True)]
    seed_sets = {tuple(sorted(c.seeds)) for c in cell_list if c.values}
    out = []
    for i, axis in enumerate(names):
        levels = {c.setting.split(",")[i] for c in cell_list if c.values}
        if len(levels) < 2:
            continue
        others = [",".join(p for j, p in enumerate(c.setting.split(",")) if j != i) for c, _, _ in rows]
        blocks, block_names = [], []
        if len(set(others)) > 1:
            blocks.append(others)
            block_names.append("other axes' setting")
        if len(seed_sets) == 1:
            blocks.append([s for _, _, s in rows])
            block_names.append("seed")
        try:
            table = two_way_anova(
                [v for _, v, _ in rows],
                [c.arm for c, _, _ in rows],
                [c.setting.split(",")[i] for c, _, _ in rows],
                blocks,
            )
        except ValueError:
            continue
        out.append({"axis": axis, "table": table, "blocks": block_names, "p": table["a:b"]["p"]})
    return out


def one_sample(values: list[float], mu: float) -> dict[str, float]:
    out = {"diff": math.nan, "t": math.nan, "df": math.nan, "p_t": math.nan, "p_flip": math.nan}
    if values:
        out["diff"] = snap(sum(values) / len(values) - mu, zero_tolerance(values, mu))
        out["p_flip"] = sign_flip_test(values, mu)
    if len(values) >= 2:
        out["t"], out["df"], out["p_t"] = one_sample_t_test(values, mu)
    out["p"] = out["p_t"] if not math.isnan(out["p_t"]) else out["p_flip"]
    return out


@dataclass
class MetricTests:
    """Everything tested for one metric; each dict with a ``p`` (the one that enters the family)."""

    metric: Metric
    cells: list[Cell]
    pairs: list[tuple[Cell, Cell, dict]]
    pooled: list[dict]
    anova: list[dict]
    one_sample: list[tuple[Cell, dict]]
    tost: list[tuple[Cell, dict]]
    in_family: bool

    def family_tests(self) -> list[dict]:
        tests = [r for _, _, r in self.pairs] + self.pooled + self.anova
        return tests + [r for _, r in self.one_sample] + [r for _, r in self.tost]


@dataclass
class Analysis:
    metrics: list[MetricTests]
    family_size: int = 0


def analyse(exp: Experiment, records: list[RunRecord]) -> Analysis:
    """Every test of the report; the family's p-values adjusted together (``holm`` and ``bh`` keys)."""
    family = {m.key for m in exp.family_metrics}
    out = []
    for metric in exp.metrics:
        cl = cells(exp, records, metric)
        pairs = [(a, b, compare_cells(a, b)) for a, b in _pairs(exp, cl) if a.values and b.values]
        anova = anova_tests(exp, cl) if exp.tests in ("arms", "both") else []
        one = (
            []
            if metric.test_against is None
            else [(c, one_sample(c.values, metric.test_against)) for c in cl if c.values]
        )
        tost = [] if metric.equivalence is None else [
            (c, tost_test(c.values, *metric.equivalence)) for c in cl if len(c.values) >= 2
        ]
        out.append(
            MetricTests(metric, cl, pairs, pooled_tests(exp, cl), anova, one, tost, metric.key in family)
        )
    tests = [t for mt in out if mt.in_family for t in mt.family_tests()]
    for t, h, b in zip(
        tests,
        holm_adjust([t["p"] for t in tests]),
        benjamini_hochberg_adjust([t["p"] for t in tests]),
        strict=True,
    ):
        t["holm"], t["bh"] = h, b
    return Analysis(out, sum(not math.isnan(t["p"]) for t in tests))


# ---- markdown -------------------------------------------------------------------------------------


def _adjusted(r: dict) -> list[str]:
    if "holm" not in r:
        return ["—", "—"]
    return [fmt_p(r["holm"]), fmt_p(r["bh"])]


def summary_table(cell_list: list[Cell], metric: Metric | None = None) -> list[str]:
    """Per cell: n, mean, sd, 95% t interval, prompt-sampling SE (accuracies), IQM, and the IQM's
    bootstrap interval when ``n >= MIN_BOOTSTRAP_N``."""
    with_se = metric is not None and (metric.se is not None or metric.prompts is not None)
    with_chosen = any(c.chosen for c in cell_list)
    head = ["setting", "arm", *(["chosen"] if with_chosen else []), "n", "mean", "sd", "95% CI (t)"]
    head += (["prompt-sampling SE (per run)"] if with_se else []) + ["IQM [95% bootstrap CI]", "failed"]
    lines = md_head(head)
    for c in cell_list:
        notes = f"{c.failed}" + (f" (+{c.missing} without the metric)" if c.missing else "")
        lead = [c.setting, c.arm, *([c.chosen or "—"] if with_chosen else [])]
        if not c.values:
            lines.append(md_row([*lead, 0, *(["n/a"] * (len(head) - len(lead) - 2)), notes]))
            continue
        s = summarize(c.values)
        iqm = fmt(s["iqm"])
        if len(c.values) >= MIN_BOOTSTRAP_N:
            iqm += f" [{fmt(s['iqm_ci_low'])}, {fmt(s['iqm_ci_high'])}]"
        row = [
            *lead,
            len(c.values),
            fmt(s["mean"]),
            fmt(s["sd"]),
            f"[{fmt(s['ci_low'])}, {fmt(s['ci_high'])}]",
        ]
        row += [fmt(prompt_sampling_se(metric, c))] if with_se else []
        lines.append(md_row([*row, iqm, notes]))
    return lines


def _label(c: Cell) -> str:
    return f"{c.arm} @ {c.setting}"


def pairwise_table(pairs: list[tuple[Cell, Cell, dict]]) -> list[str]:
    lines = []
    pair_rows = [(a, b, r) for a, b, r in pairs if r["paired"]]
    if pair_rows:
        head = ["A", "B", "pairs", "mean A − B", "A ahead", "paired t", "df", "p (paired t)",
                "p (sign flip, exact)", "p (Wilcoxon)", "Holm", "BH"]  # fmt: skip
        lines += ["Paired by seed (what the runs of a seed share: the Pairing section above):", ""]
        lines += md_head(head)
        for a, b, r in pair_rows:
            lines.append(
                md_row(
                    [
                        _label(a),
                        _label(b),
                        int(r["n"]),
                        fmt(r["diff"]),
                        f"{int(r['ahead'])} of {int(r['n'])}",
                        fmt(r["t"], 3),
                        fmt_df(r["df"]),
                        fmt_p(r["p_t"]),
                        fmt_p(r["p_flip"]),
                        fmt_p(r["p_wilcoxon"]),
                        *_adjusted(r),
                    ]  # fmt: skip
                )
            )
        lines.append("")
    rest = [(a, b, r) for a, b, r in pairs if not r["paired"]]
    if rest:
        head = ["A", "B", "mean A − B", "Welch t", "df", "p (Welch)", "p (permutation)", "Holm", "BH"]
        lines += ["Unpaired (fewer than two common seeds):", "", *md_head(head)]
        for a, b, r in rest:
            lines.append(
                md_row(
                    [
                        f"{_label(a)} (n={len(a.values)})",
                        f"{_label(b)} (n={len(b.values)})",
                        fmt(r["diff"]),
                        fmt(r["t"], 3),
                        fmt_df(r["df"]),
                        fmt_p(r["p_welch"]),
                        fmt_p(r["p_perm"]),
                        *_adjusted(r),
                    ]  # fmt: skip
                )
            )
        lines.append("")
    return lines


def pooled_table(pooled: list[dict]) -> list[str]:
    if not pooled:
        return []
    head = ["settings pooled", "A", "B", "settings", "runs", "mean over settings of A − B", "A ahead in",
            "test", "p", "Holm", "BH"]  # fmt: skip
    lines = md_head(head)
    for r in pooled:
        test = "stratified sign flip (paired)" if r["paired"] else "stratified permutation"
        lines.append(
            md_row([r["pool"], r["a"], r["b"], r["settings"], r["runs"], fmt(r["diff"]),
                  f"{r['ahead']} of {r['settings']}", test, fmt_p(r["p"]), *_adjusted(r)])  # fmt: skip
        )
    return lines


def anova_table(anova: list[dict]) -> list[str]:
    lines = []
    for r in anova:
        t = r["table"]
        blocks = f" (additive blocks: {', '.join(r['blocks'])})" if r["blocks"] else ""
        lines += [
            f"Two-way ANOVA of the per-run values, arm x {r['axis']}{blocks}; type II sums of squares:",
            "",
        ]
        head = ["term", "SS", "df", "F", "p", "Holm", "BH"]
        lines += md_head(head)
        # a residual of exactly 0 (stats.two_way_anova: within rounding) leaves every F and p undefined
        undefined = t["residual"]["ss"] == 0 and t["residual"]["df"] > 0
        for key, name in [
            ("a", "arm"),
            ("b", r["axis"]),
            ("a:b", f"arm x {r['axis']} (interaction)"),
            ("residual", "residual"),
        ]:
            adj = _adjusted(r) if key == "a:b" else ["—", "—"]
            f, p = fmt(t[key]["F"], 3), fmt_p(t[key]["p"])
            if undefined and key != "residual":
                f = p = NO_WITHIN_VARIATION
            lines.append(md_row([name, fmt(t[key]["ss"]), fmt_df(t[key]["df"]), f, p, *adj]))
        lines.append("")
    return lines


def one_sample_table(metric: Metric, rows: list[tuple[Cell, dict]]) -> list[str]:
    mu = metric.test_against
    head = ["setting", "arm", "n", f"mean − {fmt(mu)}", "t", "df", "p (t)", "p (sign flip)", "Holm", "BH"]
    lines = md_head(head)
    for c, r in rows:
        lines.append(
            md_row(
                [
                    c.setting,
                    c.arm,
                    len(c.values),
                    fmt(r["diff"]),
                    fmt(r["t"], 3),
                    fmt_df(r["df"]),
                    fmt_p(r["p_t"]),
                    fmt_p(r["p_flip"]),
                    *_adjusted(r),
                ]
            )  # fmt: skip
        )
    return lines


def tost_table(metric: Metric, rows: list[tuple[Cell, dict]]) -> list[str]:
    target, margin = metric.equivalence
    head = ["setting", "arm", "n", "mean", "90% CI (t)", f"equivalent to {fmt(target, 2)} ± {fmt(margin, 2)}",
            "p (TOST)", "Holm", "BH"]  # fmt: skip
    lines = md_head(head)
    for c, r in rows:
        inside = target - margin < r["ci90_low"] and r["ci90_high"] < target + margin
        lines.append(
            md_row([c.setting, c.arm, len(c.values), fmt(sum(c.values) / len(c.values)),
                  f"[{fmt(r['ci90_low'])}, {fmt(r['ci90_high'])}]", "yes" if inside else "not shown",
                  fmt_p(r["p"]), *_adjusted(r)])  # fmt: skip
        )
    return lines


def family_section(exp: Experiment, analysis: Analysis) -> list[str]:
    """What the multiplicity family is, and how many of its tests survive each adjustment."""
    members = [mt for mt in analysis.metrics if mt.in_family]
    tests = [t for mt in members for t in mt.family_tests() if not math.isnan(t["p"])]
    which = (
        "the metrics marked `primary`"
        if any(m.primary for m in exp.metrics)
        else "every metric (none is marked `primary`)"
    )
    kinds = "arm pairs per setting (paired t when the arms share seeds, else Welch)"
    if exp.reference:
        kinds = f"each arm against {exp.reference} per setting (paired t when they share seeds, else Welch)"
    return [
        f"The family of tests: {len(tests)} tests on {which}: {kinds}, pooled tests over settings, the "
        "arm x axis interactions of the two-way ANOVAs, and the one-sample and equivalence tests asked "
        f"for. Their p-values are adjusted together: Holm (family-wise error rate) and "
        f"Benjamini-Hochberg (false discovery rate); at {ALPHA}: "
        f"{sum(t['holm'] <= ALPHA for t in tests)} kept by Holm, "
        f"{sum(t['bh'] <= ALPHA for t in tests)} by BH, "
        f"{sum(t['p'] <= ALPHA for t in tests)} unadjusted. Tests of other metrics show — for the "
        "adjusted p-values and are descriptive.",
        "",
    ]


def metric_section(exp: Experiment, mt: MetricTests) -> list[str]:
    """Markdown: the summary table, pairwise, pooled, ANOVA, one-sample and equivalence tests."""
    metric = mt.metric
    flag = " (primary)" if metric.primary else ""
    lines = [f"### {metric.key}{flag}", "", *summary_table(mt.cells, metric), ""]
    if any(0 < len(c.values) < MIN_BOOTSTRAP_N for c in mt.cells):
        lines += [
            f"IQM bootstrap intervals are shown only for n >= {MIN_BOOTSTRAP_N}: with fewer runs a 95% "
            "percentile-bootstrap interval covers about 0.91 (bench/bootstrap_coverage.py); use the t "
            "interval.",
            "",
        ]
    if metric.se is not None or metric.prompts is not None:
        source = f"`{metric.se}` per run" if metric.se else f"binomial, {metric.prompts} prompts"
        lines += [
            f"Prompt-sampling SE ({source}): the error of one run's value from the finite held-out set; "
            "averaging seeds does not remove it (they share the prompts).",
            "",
        ]
    pairs = pairwise_table(mt.pairs)
    if pairs:
        lines += ["Two-sided tests of the per-seed values:", "", *pairs]
    pooled = pooled_table(mt.pooled)
    if pooled:
        lines += ["The arms over several settings at once (two-sided; settings never mix; the statistic is "
                  "the mean over settings of the difference of means):", "", *pooled, ""]  # fmt: skip
    lines += anova_table(mt.anova)
    if mt.one_sample:
        lines += [f"One-sample tests of mean = {fmt(metric.test_against)} (two-sided):", "",
                  *one_sample_table(metric, mt.one_sample), ""]  # fmt: skip
    if mt.tost:
        target, margin = metric.equivalence
        lines += [f"Equivalence (two one-sided t-tests, H0: |mean − {fmt(target, 2)}| >= {fmt(margin, 2)}; "
                  "equivalent at 0.05 when the 90% interval lies inside the margin):", "",
                  *tost_table(metric, mt.tost), ""]  # fmt: skip
    return lines


def crossing_section(exp: Experiment, profile, records: list[RunRecord]) -> list[str]:
    """Per arm and setting, where each run's curve stops being above its baseline (e.g. the k at which
    the trained policy's pass@k falls to the starting policy's): :func:`curve_crossing` of the per-run
    gains ``metric - baseline`` (reduce: the profile's last), and the mean gain at each x."""
    how = profile.reduces[-1]
    head = ["setting", "arm", "runs", "crossed within the measured x", "crossing x per run", "median",
            *[f"mean gain at {x:g}" for x in profile.x]]  # fmt: skip
    lines = md_head(head)
    for setting in settings_of(records):
        for arm in exp.arms:
            runs = finished(records, setting, arm.label)
            gains = [
                [r.values.get(Metric(m, how).key, math.nan) - r.values.get(Metric(b, how).key, math.nan)
                 for m, b in zip(profile.metrics, profile.baseline, strict=True)]
                for r in runs
            ]  # fmt: skip
            gains = [g for g in gains if not all(math.isnan(v) for v in g)]
            if not gains:
                continue
            cross = [curve_crossing(list(profile.x), g, profile.log2) for g in gains]
            crossed = sorted(c for c in cross if not math.isnan(c))
            median = crossed[len(crossed) // 2] if len(crossed) == len(cross) else math.nan
            means = [sum(g[j] for g in gains) / len(gains) for j in range(len(profile.x))]
            lines.append(
                md_row(
                    [
                        setting,
                        arm.label,
                        len(gains),
                        f"{len(crossed)} of {len(gains)}",
                        ", ".join("never" if math.isnan(c) else f"{c:.3g}" for c in cross),
                        "n/a" if math.isnan(median) else f"{median:.3g}",
                        *[fmt(m) for m in means],
                    ]
                )  # fmt: skip
            )
    return lines
