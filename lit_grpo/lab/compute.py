"""Curves at matched compute: a logged metric against the completions or completion tokens generated so far
(``x: completions | tokens`` of a curve), so that arms which sample more per step (dynamic sampling refills)
are compared at the same sampling cost rather than at the same step.

The x of a run at a step is its cumulative counter logged by the module at that step
(``rollout/completions_generated``, ``rollout/tokens_generated``: every generated completion, the dropped
groups included). Runs have different x at the same step, so values are compared at the same x by linear
interpolation between a run's logged points, never extrapolated past its last one. The matched budget of
a setting is the largest x every finished run of it reached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lit_grpo.checks import require
from lit_grpo.lab.collect import RunRecord, Series, finished, settings_of
from lit_grpo.lab.markdown import fmt, fmt_p, md_head, md_row
from lit_grpo.lab.spec import X_METRICS, Curve, Experiment

X_LABELS = {"step": "step", "completions": "completions generated", "tokens": "completion tokens generated"}

Points = list[tuple[float, float]]  # (x, value), x increasing


def on_x(series: Series, x_series: Series) -> Points:
    """``series`` against the x logged at the same steps (steps where either is missing are left out)."""
    xs = dict(x_series)
    return [(xs[step], value) for step, value in series if step in xs]


def interpolate(points: Points, x: float) -> float:
    """The value at ``x`` by linear interpolation between the points around it; NaN outside their range."""
    if not points or x < points[0][0] or x > points[-1][0]:
        return math.nan
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]  # a single point, at x


def grid(runs: Sequence[Points], size: int = 60) -> list[float]:
    """``size`` evenly spaced x from the smallest first x to the largest last x of the runs."""
    runs = [p for p in runs if p]
    if not runs:
        return []
    lo, hi = min(p[0][0] for p in runs), max(p[-1][0] for p in runs)
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / (size - 1) for i in range(size)]


def matched_budget(runs: Sequence[Points]) -> float:
    """The largest x that every run reached (its last x, the smallest over runs); NaN without runs."""
    lasts = [p[-1][0] for p in runs if p]
    return min(lasts) if lasts and len(lasts) == len(runs) else math.nan


def smooth(series: Series, window: int) -> Series:
    """Trailing moving average over ``window`` logged points (``window = 1`` leaves it as it is)."""
    values = [v for _, v in series]
    out = []
    for i, (step, _) in enumerate(series):
        part = values[max(0, i - window + 1) : i + 1]
        out.append((step, sum(part) / len(part)))
    return out


def curve_points(curve: Curve, record: RunRecord, metric: str, window: int = 1) -> Points:
    """One run's ``metric`` (smoothed over ``window`` logged points) against the curve's x."""
    series = smooth(record.series.get(metric, []), window)
    if curve.x == "step":
        return [(float(s), v) for s, v in series]
    return on_x(series, record.series.get(X_METRICS[curve.x], []))


def at_budget(exp: Experiment, curve: Curve, records: list[RunRecord]) -> list[dict]:
    """Per setting and curve metric: the matched budget and, per arm, each finished run's (seed, value at
    the budget, step at which it reached it)."""
    out = []
    for setting in settings_of(records):
        done = finished(records, setting)
        steps_x = {id(r): [(float(s), x) for s, x in r.series.get(X_METRICS[curve.x], [])] for r in done}
        for metric in curve.metrics:
            points = {id(r): curve_points(curve, r, metric, curve.smooth) for r in done}
            budget = matched_budget([points[id(r)] for r in done])
            arms = {}
            for arm in exp.arms:
                arms[arm.label] = [
                    (r.run.seed, interpolate(points[id(r)], budget), _step_at(steps_x[id(r)], budget))
                    for r in finished(records, setting, arm.label)
                ]
            out.append({"setting": setting, "metric": metric, "budget": budget, "arms": arms})
    return out


def _step_at(step_x: Points, x: float) -> float:
    """The (interpolated) step at which a run's counter reached ``x``; ``step_x`` is (step, x)."""
    return interpolate([(cx, s) for s, cx in step_x], x)


def matched_section(exp: Experiment, curve: Curve, records: list[RunRecord]) -> list[str]:
    """Markdown: per setting and metric, each arm's values at the matched budget (mean, 95% t interval,
    the step at which the runs reached it) and the paired differences between arms by seed (descriptive:
    not in the report's family of tests)."""
    from lit_grpo.lab.pairing import arm_pairs
    from lit_grpo.lab.stats import paired, summarize

    what = X_LABELS[curve.x]

    def budget(x: float) -> str:
        return f"{x:.0f}" if math.isfinite(x) else "n/a"

    lines = [
        f"Each run's value at its setting's matched budget, the most {what} that every finished run of the "
        "setting reached, interpolated linearly between its logged points (smoothing as the figure's); "
        "'step' is the step at which a run reached the budget: arms that sample more per step (dynamic "
        "sampling's refills) get there in fewer steps. Paired by seed; descriptive (not in the family of "
        "tests).",
        "",
    ]
    head = ["setting", "metric", f"budget ({what})", "arm", "n", "mean", "95% CI (t)",
            "mean step at the budget"]
    lines += md_head(head)
    rows = at_budget(exp, curve, records)
    for row in rows:
        for arm, runs in row["arms"].items():
            values = [v for _, v, _ in runs if math.isfinite(v)]
            steps = [s for _, _, s in runs if math.isfinite(s)]
            if not values:
                lines.append(
                    md_row(
                        [row["setting"], row["metric"], budget(row["budget"]), arm, 0, "n/a", "n/a", "n/a"]
                    )
                )
                continue
            s = summarize(values)
            ci = f"[{fmt(s['ci_low'])}, {fmt(s['ci_high'])}]"
            lines.append(md_row([row["setting"], row["metric"], budget(row["budget"]), arm, len(values),
                                 fmt(s["mean"]), ci, fmt(sum(steps) / len(steps), 1)]))
    head = ["setting", "metric", "A", "B", "pairs", "mean A − B", "A ahead", "p (paired t)",
            "p (sign flip, exact)"]
    paired_rows = []
    for row in rows:
        by_seed = {
            arm: {seed: v for seed, v, _ in runs if math.isfinite(v)} for arm, runs in row["arms"].items()
        }
        for a, b in arm_pairs(exp, list(by_seed)):
            seeds = [s for s in by_seed[a] if s in by_seed[b]]
            if len(seeds) < 2:
                continue
            r = paired([by_seed[a][s] for s in seeds], [by_seed[b][s] for s in seeds])
            ahead = f"{int(r['ahead'])} of {len(seeds)}"
            paired_rows.append(md_row([row["setting"], row["metric"], a, b, len(seeds), fmt(r["diff"]), ahead,
                                       fmt_p(r["p_t"]), fmt_p(r["p_flip"])]))
    if paired_rows:
        lines += ["", *md_head(head), *paired_rows]
    return lines


def curve_crossing(x: list[float], gain: list[float], log_x: bool = True, atol: float = 1e-6) -> float:
    """Where a gain curve (trained minus starting pass@k at ``x = k``) first stops being positive.

    The first ``x_j`` with ``gain_j <= 0`` (gains within ``atol`` of 0 count as 0: two saturated curves
    meet), linearly interpolated (in ``log2 x`` with ``log_x``) from the last positive point before it;
    ``x_0`` when the gain is never positive; NaN when it stays positive up to the last ``x`` (no
    crossing within the measured k). NaN gains are skipped.
    """
    points = [
        (float(a), 0.0 if abs(g) <= atol else float(g))
        for a, g in zip(x, gain, strict=True)
        if not math.isnan(g)
    ]
    require(
        not log_x or not any(a <= 0 for a, _ in points), f"curve_crossing with log_x needs x > 0, got {x}"
    )
    for j, (a, g) in enumerate(points):
        if g > 0:
            continue
        if j == 0:
            return a
        (a0, g0) = points[j - 1]
        t = g0 / (g0 - g)
        if log_x:
            return 2 ** (math.log2(a0) + t * (math.log2(a) - math.log2(a0)))
        return a0 + t * (a - a0)
    return math.nan
