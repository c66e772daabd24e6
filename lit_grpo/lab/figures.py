"""Figures of a comparison: learning curves with 95% bands over seeds, and profiles (e.g. pass@k over k).

Drawn with matplotlib (the ``lab`` extra) on the Agg canvas (:func:`new_figure`); without it every function
returns ``None`` (one warning) and the report says that the figure was not drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lit_grpo.figure import agg_figure
from lit_grpo.lab.collect import RunRecord, Series, finished, settings_of
from lit_grpo.lab.compute import X_LABELS, curve_points, grid, interpolate, matched_budget, smooth
from lit_grpo.lab.spec import Curve, Experiment, Metric, Profile
from lit_grpo.lab.stats import t_quantile

#: the optional extra that draws the figures (lit_grpo.extras); without it the report still has its tables
EXTRA = "lab"


def new_figure(figsize: tuple[float, float]) -> Any | None:
    """A figure (:func:`lit_grpo.figure.agg_figure`), or ``None`` (one warning) without matplotlib."""
    return agg_figure(figsize, EXTRA, "the report draws no figures (its tables are complete)")


def mean_band(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float, int]:
    """``(mean, low, high, n)`` of finite values: the Student t interval (``low = high = mean`` for n = 1)."""
    xs = [v for v in values if math.isfinite(v)]
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = sum(xs) / n
    if n == 1:
        return mean, mean, mean, 1
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, n


def curve_band(runs: Sequence[Series], window: int = 1) -> list[tuple[int, float, float, float, int]]:
    """Per step of any run: ``(step, mean, low, high, n)`` over the runs that logged that step."""
    by_step: dict[int, list[float]] = {}
    for series in runs:
        for step, value in smooth(series, window):
            by_step.setdefault(step, []).append(value)
    return [(step, *mean_band(by_step[step])) for step in sorted(by_step)]


def _grid(n: int, width: float = 4.8, height: float = 3.4):
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = new_figure((max(width * cols, 6.4), height * rows + 0.6))
    if fig is None:
        return None, []
    axes = fig.subplots(rows, cols, squeeze=False).flatten().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _panels(exp: Experiment, records: list[RunRecord]):
    """A figure with one panel per setting, and per panel ``(ax, setting, [(arm, its done runs), ...])``."""
    settings = settings_of(records)
    fig, axes = _grid(len(settings))
    arms = [[(arm, finished(records, setting, arm.label)) for arm in exp.arms] for setting in settings]
    return fig, list(zip(axes, settings, arms, strict=False))


def _save(fig, panels: list, title: str, path: Path) -> Path | None:
    """Title, grid and legend on every panel, ``title`` above them all; the figure saved to ``path`` (None
    without a figure)."""
    if fig is None:
        return None
    for ax, setting, _ in panels:
        ax.set_title(setting, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def x_band(runs: Sequence[list[tuple[float, float]]]) -> list[tuple[float, float, float, float, int]]:
    """Per x of an even grid: ``(x, mean, low, high, n)`` over the runs whose logged range holds that x
    (each interpolated linearly; runs end where their compute ends)."""
    out = []
    for x in grid(runs):
        stats = mean_band([interpolate(points, x) for points in runs])
        if stats[3]:
            out.append((x, *stats))
    return out


def curve_figure(exp: Experiment, curve: Curve, records: list[RunRecord], path: Path) -> Path | None:
    """One panel per setting; a line (mean) and band (95% t interval) per arm and metric, against the step
    or, with ``curve.x``, the completions or completion tokens generated so far (dashed: the setting's
    matched budget, the largest x every run reached)."""
    fig, panels = _panels(exp, records)  # no panels without matplotlib
    for ax, setting, arms in panels:
        for arm, runs in arms:
            for name in curve.metrics:
                if curve.x == "step":
                    band = curve_band([r.series.get(name, []) for r in runs], curve.smooth)
                else:
                    band = x_band([curve_points(curve, r, name, curve.smooth) for r in runs])
                if not band:
                    continue
                steps, mean, lo, hi, _ = zip(*band, strict=True)
                label = arm.label if len(curve.metrics) == 1 else f"{arm.label}: {name}"
                (line,) = ax.plot(steps, mean, label=f"{label} (n={len(runs)})", linewidth=1.3)
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        if curve.x != "step":
            budget = matched_budget(
                [curve_points(curve, r, curve.metrics[0]) for r in finished(records, setting)]
            )
            if math.isfinite(budget):
                ax.axvline(budget, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel(X_LABELS[curve.x])
        ax.set_ylabel(curve.metrics[0] if len(curve.metrics) == 1 else "value")
    smoothing = f", moving average over {curve.smooth} points" if curve.smooth > 1 else ""
    title = f"{curve.title or ', '.join(curve.metrics)}\nmean and 95% t band over seeds{smoothing}"
    return _save(fig, panels, title, path)


def profile_figure(exp: Experiment, profile: Profile, records: list[RunRecord], path: Path) -> Path | None:
    """One panel per setting; per arm and reduce the metrics' means over ``x`` with 95% t bands."""
    fig, panels = _panels(exp, records)  # no panels without matplotlib
    for ax, _, arms in panels:
        for arm, runs in arms:
            for how in profile.reduces:
                stats = [
                    mean_band([r.values.get(Metric(m, how).key, math.nan) for r in runs])
                    for m in profile.metrics
                ]
                mean, lo, hi, n = zip(*stats, strict=True)
                (line,) = ax.plot(profile.x, mean, marker="o", label=f"{arm.label} ({how}, n={max(n)})")
                ax.fill_between(profile.x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
                if profile.baseline:
                    base = [mean_band([r.values.get(Metric(m, how).key, math.nan) for r in runs])[0]
                            for m in profile.baseline]  # fmt: skip
                    ax.plot(
                        profile.x,
                        base,
                        linestyle="--",
                        color=line.get_color(),
                        label=f"{arm.label} (baseline)",
                    )
        if profile.log2:
            ax.set_xscale("log", base=2)
            ax.set_xticks(profile.x, [f"{v:g}" for v in profile.x])
        ax.set_xlabel(profile.xlabel)
    return _save(fig, panels, f"{profile.title or 'profile'}\nmean and 95% t band over seeds", path)
