"""Figures of the diagnostics (matplotlib, Agg backend), for TensorBoard and PNG files.

matplotlib is optional: without it :func:`new_figure` warns once and every figure function returns
``None``, so callers skip the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lit_grpo.figure import agg_figure

#: the optional extra that draws the figures (lit_grpo.extras); without it the scalars are still logged
EXTRA = "plots"


def new_figure(figsize: tuple[float, float]) -> Any | None:
    """A figure (:func:`lit_grpo.figure.agg_figure`), or ``None`` (one warning) without matplotlib."""
    return agg_figure(figsize, EXTRA, "lit-grpo diagnostics draw no figures (scalars are still logged)")


def pass_at_k_figure(curves: Mapping[str, Mapping[int, float]], title: str = "pass@k") -> Any | None:
    """pass@k against k (log2 axis), one line per named curve, e.g. ``{"start": ..., "step 500": ...}``."""
    fig = new_figure((5, 3.5))
    if fig is None:
        return None
    ax = fig.subplots()
    for name, curve in curves.items():
        ks = sorted(curve)
        ax.plot(ks, [curve[k] for k in ks], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ticks = sorted({k for curve in curves.values() for k in curve})
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def bar_figure(
    labels: Sequence[str], series: Mapping[str, Sequence[float]], xlabel: str, ylabel: str, title: str
) -> Any | None:
    """Grouped bars: one group per label, one bar per named series (each ``[len(labels)]``)."""
    fig = new_figure((5.5, 3.5))
    if fig is None:
        return None
    ax = fig.subplots()
    width = 0.8 / max(len(series), 1)
    for j, (name, values) in enumerate(series.items()):
        xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, list(values), width=width, label=name)
    ax.set_xticks(range(len(labels)), list(labels))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    fig.tight_layout()
    return fig


def weight_curve_figure(ps: Sequence[float], curves: Mapping[str, Sequence[float]], G: int) -> Any | None:
    """Expected update weight omega(p) on grad p against the pass rate p, one line per estimator."""
    fig = new_figure((7.5, 3.8))
    if fig is None:
        return None
    ax = fig.subplots()
    for j, (name, omega) in enumerate(curves.items()):
        ax.plot(list(ps), list(omega), label=name, linestyle=("-", "--", ":", "-.")[j // 10 % 4])
    ax.set_xlabel("pass rate p")
    ax.set_ylabel("omega(p): expected update / grad p")
    ax.set_xlim(0, 1)
    ax.set_title(f"estimator weight curves, G = {G}")
    ax.grid(alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize="small")
    fig.tight_layout()
    return fig


def shadow_figure(
    labels: Sequence[str], cos: Sequence[Sequence[float]], starved: Sequence[float], title: str
) -> Any | None:
    """The cosine matrix between estimators' update directions (NaN blank) beside their starved shares."""
    import math

    n = len(labels)
    fig = new_figure((5.5 + 0.6 * n, 1.8 + 0.45 * n))
    if fig is None:
        return None
    ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [max(n, 2), 2]})
    grid = [[v if math.isfinite(v) else math.nan for v in row] for row in cos]
    image = ax.imshow(grid, vmin=-1, vmax=1, cmap="RdBu")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if math.isfinite(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize="x-small")
    ax.set_xticks(range(n), list(labels), rotation=45, ha="right", fontsize="small")
    ax.set_yticks(range(n), list(labels), fontsize="small")
    ax.set_title("cosine of update directions", fontsize="medium")
    fig.colorbar(image, ax=ax, shrink=0.8)
    bx.barh(range(n), list(starved))
    bx.set_yticks(range(n), list(labels), fontsize="small")
    bx.invert_yaxis()
    bx.set_xlim(0, 1)
    bx.set_xlabel("starved share of groups")
    bx.grid(alpha=0.3, axis="x")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def fidelity_figure(
    ps: Sequence[float],
    curves: Mapping[str, Sequence[float]],
    points: Mapping[str, Sequence[tuple[float, float, float]]],
    snr: Mapping[str, Mapping[str, float]],
    title: str,
) -> Any | None:
    """Measured omega per prompt (points with standard-error bars) on the predicted curves, one colour per
    estimator; beside it the signal-to-noise of one group per prompt, summed over each pass-rate bin."""
    import math

    fig = new_figure((11, 4.2))
    if fig is None:
        return None
    ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    for j, (name, omega) in enumerate(curves.items()):
        color = f"C{j % 10}"
        ax.plot(list(ps), list(omega), color=color, label=name, linewidth=1.2, linestyle=("-", "--")[j % 2])
        kept = [(p, w, s) for p, w, s in points.get(name, []) if math.isfinite(w)]
        if kept:
            xs, ws, ss = zip(*kept, strict=True)
            ax.errorbar(
                xs, ws, yerr=[2 * s for s in ss], fmt="o", color=color, markersize=3, capsize=0, alpha=0.8
            )
    ax.set_xlabel("pass rate of the prompt (reference group)")
    ax.set_ylabel("omega: mean estimate / grad p")
    ax.set_xlim(0, 1)
    ax.set_title("measured (points, +-2 s.e.) vs predicted omega(p)", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    bins = ["0.0-0.2", "0.2-0.5", "0.5-0.7", "0.7-0.9", "0.9-1.0"]
    for j, (name, values) in enumerate(snr.items()):
        ys = [values.get(b, math.nan) for b in bins]
        bx.plot(range(len(bins)), ys, marker="o", color=f"C{j % 10}", label=name)
    bx.set_xticks(range(len(bins)), bins)
    bx.set_xlabel("pass-rate bin")
    bx.set_ylabel("|mean| / sqrt(variance), one group per prompt")
    bx.set_title("signal-to-noise per bin", fontsize="medium")
    bx.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
