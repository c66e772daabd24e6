"""The numbers of a report: per-cell summaries over seeds, pairwise and one-sample tests, as markdown."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from lit_grpo.diagnostics.stats import permutation_test, stratified_permutation_test, summarize, welch_t_test
from lit_grpo.experiments.collect import RunRecord
from lit_grpo.experiments.inference import one_sample_t_test, sign_flip_test
from lit_grpo.experiments.spec import Experiment, Metric


@dataclass
class Cell:
    """The per-seed values of one metric for one setting x arm."""

    setting: str
    arm: str
    values: list[float]  # finite values of finished runs, in seed order
    failed: int  # runs that crashed or never finished
    missing: int  # finished runs that did not log the metric


def fmt(x: float | None, digits: int = 4) -> str:
    """Numbers for tables: fixed decimals, scientific when very small or large, "n/a" for NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x != 0 and (abs(x) < 10 ** -(digits - 1) or abs(x) >= 1e5):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def fmt_p(p: float) -> str:
    return "n/a" if math.isnan(p) else ("< 1e-4" if p < 1e-4 else f"{p:.4f}")


def cells(exp: Experiment, records: list[RunRecord], metric: Metric) -> list[Cell]:
    settings = list(dict.fromkeys(r.run.setting_label for r in records))
    out = []
    for setting in settings:
        for arm in exp.arms:
            rs = [r for r in records if r.run.setting_label == setting and r.run.arm == arm.label]
            done = [r.values.get(metric.key, math.nan) for r in rs if r.status == "done"]
            values = [v for v in done if math.isfinite(v)]
            out.append(
                Cell(setting, arm.label, values, sum(r.status != "done" for r in rs), len(done) - len(values))
            )
    return out


def _row(items) -> str:
    return "| " + " | ".join(str(i) for i in items) + " |"


def summary_table(cell_list: list[Cell]) -> list[str]:
    lines = [
        _row(["setting", "arm", "n", "mean", "sd", "95% CI (t)", "IQM [95% bootstrap CI]", "failed"]),
        _row(["---"] * 8),
    ]
    for c in cell_list:
        notes = f"{c.failed}" + (f" (+{c.missing} without the metric)" if c.missing else "")
        if not c.values:
            lines.append(_row([c.setting, c.arm, 0, "n/a", "n/a", "n/a", "n/a", notes]))
            continue
        s = summarize(c.values)
        lines.append(
            _row(
                [
                    c.setting,
                    c.arm,
                    len(c.values),
                    fmt(s["mean"]),
                    fmt(s["sd"]),
                    f"[{fmt(s['ci_low'])}, {fmt(s['ci_high'])}]",
                    f"{fmt(s['iqm'])} [{fmt(s['iqm_ci_low'])}, {fmt(s['iqm_ci_high'])}]",
                    notes,
                ]
            )
        )
    return lines


def pairwise(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean difference, Welch t, df and p, and the permutation p of two samples (NaN where undefined)."""
    out = {"diff": math.nan, "t": math.nan, "df": math.nan, "p_welch": math.nan, "p_perm": math.nan}
    if a and b:
        out["diff"] = sum(a) / len(a) - sum(b) / len(b)
        out["p_perm"] = permutation_test(a, b)
    if len(a) >= 2 and len(b) >= 2:
        out["t"], out["df"], out["p_welch"] = welch_t_test(a, b)
    return out


def _one_axis_apart(a: str, b: str) -> bool:
    """Two setting labels (``G=2,P=1``) that differ in exactly one sweep axis."""
    return sum(x != y for x, y in zip(a.split(","), b.split(","), strict=True)) == 1


def _pairs(exp: Experiment, cell_list: list[Cell]) -> list[tuple[Cell, Cell]]:
    """Arms within a setting; settings one sweep axis apart within an arm (as ``exp.tests`` asks)."""
    pairs = []
    if exp.tests in ("arms", "both"):
        by_setting: dict[str, list[Cell]] = {}
        for c in cell_list:
            by_setting.setdefault(c.setting, []).append(c)
        pairs += [p for group in by_setting.values() for p in itertools.combinations(group, 2)]
    if exp.tests in ("settings", "both"):
        by_arm: dict[str, list[Cell]] = {}
        for c in cell_list:
            by_arm.setdefault(c.arm, []).append(c)
        pairs += [
            (a, b)
            for group in by_arm.values()
            for a, b in itertools.combinations(group, 2)
            if _one_axis_apart(a.setting, b.setting)
        ]
    return pairs


def pairwise_table(exp: Experiment, cell_list: list[Cell]) -> list[str]:
    pairs = _pairs(exp, cell_list)
    if not pairs:
        return []
    lines = [
        _row(["A", "B", "mean A − B", "Welch t", "df", "p (Welch)", "p (permutation)"]),
        _row(["---"] * 7),
    ]
    for a, b in pairs:
        r = pairwise(a.values, b.values)
        lines.append(
            _row(
                [
                    f"{a.arm} @ {a.setting} (n={len(a.values)})",
                    f"{b.arm} @ {b.setting} (n={len(b.values)})",
                    fmt(r["diff"]),
                    fmt(r["t"], 3),
                    fmt(r["df"], 2),
                    fmt_p(r["p_welch"]),
                    fmt_p(r["p_perm"]),
                ]
            )
        )
    return lines


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


def pooled_table(exp: Experiment, cell_list: list[Cell]) -> list[str]:
    """Each pair of arms over several settings at once (a swept experiment with ``tests: arms | both``):
    the mean over settings of the per-setting difference, the settings where A is ahead, and the
    stratified permutation p (labels shuffled within each setting; :func:`stratified_permutation_test`)."""
    settings = list(dict.fromkeys(c.setting for c in cell_list))
    if exp.tests not in ("arms", "both") or len(settings) < 2:
        return []
    by_key = {(c.setting, c.arm): c.values for c in cell_list}
    arms = list(dict.fromkeys(c.arm for c in cell_list))
    lines = []
    for a, b in itertools.combinations(arms, 2):
        for name, group in _pools(settings).items():
            strata = [(by_key[s, a], by_key[s, b]) for s in group if by_key[s, a] and by_key[s, b]]
            if len(strata) < 2:
                continue
            diffs = [sum(x) / len(x) - sum(y) / len(y) for x, y in strata]
            lines.append(_row([name, a, b, len(strata), sum(len(x) + len(y) for x, y in strata),
                               fmt(sum(diffs) / len(diffs)), f"{sum(d > 0 for d in diffs)} of {len(diffs)}",
                               fmt_p(stratified_permutation_test(strata))]))  # fmt: skip
    if not lines:
        return []
    head = ["settings pooled", "A", "B", "settings", "runs", "mean over settings of A − B", "A ahead in",
            "p (stratified permutation)"]  # fmt: skip
    return [_row(head), _row(["---"] * len(head)), *lines]


def one_sample(values: list[float], mu: float) -> dict[str, float]:
    out = {"diff": math.nan, "t": math.nan, "df": math.nan, "p_t": math.nan, "p_flip": math.nan}
    if values:
        out["diff"] = sum(values) / len(values) - mu
        out["p_flip"] = sign_flip_test(values, mu)
    if len(values) >= 2:
        out["t"], out["df"], out["p_t"] = one_sample_t_test(values, mu)
    return out


def one_sample_table(metric: Metric, cell_list: list[Cell]) -> list[str]:
    mu = metric.test_against
    lines = [
        _row(["setting", "arm", "n", f"mean − {fmt(mu)}", "t", "df", "p (t)", "p (sign flip)"]),
        _row(["---"] * 8),
    ]
    for c in cell_list:
        r = one_sample(c.values, mu)
        lines.append(
            _row(
                [
                    c.setting,
                    c.arm,
                    len(c.values),
                    fmt(r["diff"]),
                    fmt(r["t"], 3),
                    fmt(r["df"], 2),
                    fmt_p(r["p_t"]),
                    fmt_p(r["p_flip"]),
                ]
            )
        )
    return lines


def metric_section(exp: Experiment, records: list[RunRecord], metric: Metric) -> list[str]:
    """Markdown: the summary table, pairwise tests and (with ``test_against``) one-sample tests."""
    cell_list = cells(exp, records, metric)
    lines = [f"### {metric.key}", "", *summary_table(cell_list), ""]
    tests = pairwise_table(exp, cell_list)
    if tests:
        lines += ["Two-sample tests of the per-seed values (two-sided):", "", *tests, ""]
    pooled = pooled_table(exp, cell_list)
    if pooled:
        lines += [
            "The arms over several settings at once (two-sided; labels shuffled within each setting, so "
            "settings never mix; the statistic is the mean over settings of the difference of means):",
            "",
            *pooled,
            "",
        ]
    if metric.test_against is not None:
        lines += [
            f"One-sample tests of mean = {fmt(metric.test_against)} (two-sided):",
            "",
            *one_sample_table(metric, cell_list),
            "",
        ]
    return lines
