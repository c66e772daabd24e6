"""Reading each run's TensorBoard scalars back and reducing them to one number per run and metric."""

from __future__ import annotations

import glob
import math
from dataclasses import dataclass, field

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lit_grpo.checks import require
from lit_grpo.lab.child import read_status
from lit_grpo.lab.grid import Run
from lit_grpo.lab.spec import X_METRICS, Experiment, Metric

Series = list[tuple[int, float]]  # (step, value), steps increasing, one value per step


@dataclass
class RunRecord:
    """A run's status and what the report needs from its events."""

    run: Run
    status: str  # "done", "failed" or "missing" (never ran)
    returncode: int | str | None = None
    seconds: float | None = None
    values: dict[str, float] = field(default_factory=dict)  # Metric.key -> value (NaN when not logged)
    se: dict[str, float] = field(default_factory=dict)  # Metric.key -> the run's prompt-sampling SE
    series: dict[str, Series] = field(default_factory=dict)  # curve metric -> series


def settings_of(records: list[RunRecord]) -> list[str]:
    """The settings of ``records``, in the order they first appear."""
    return list(dict.fromkeys(r.run.setting_label for r in records))


def finished(records: list[RunRecord], setting: str, arm: str | None = None) -> list[RunRecord]:
    """The finished runs of ``setting`` (of ``arm`` when given)."""
    return [
        r
        for r in records
        if r.status == "done" and r.run.setting_label == setting and arm in (None, r.run.arm)
    ]


def read_scalars(log_dir) -> dict[str, Series]:
    """Every scalar of the TensorBoard events under ``log_dir``; the last value wins at a repeated step."""
    scalars: dict[str, dict[int, float]] = {}
    for path in sorted(glob.glob(f"{log_dir}/events.out.tfevents.*")):
        events = EventAccumulator(path, size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            for e in events.Scalars(tag):
                scalars.setdefault(tag, {})[e.step] = float(e.value)
    return {tag: sorted(values.items()) for tag, values in scalars.items()}


def reduce_series(series: Series, how: str, tail: float = 0.2) -> float:
    """One number from a series: its last, first, mean, min or max value, ``delta`` = last - first, or
    the mean of its last ``ceil(tail * n)`` values (``tail``). NaN for an empty series."""
    values = [v for _, v in series]
    if not values:
        return math.nan
    kept = values[-max(1, math.ceil(tail * len(values))) :]
    reducers = {"last": lambda: values[-1], "first": lambda: values[0],
                "delta": lambda: values[-1] - values[0], "mean": lambda: sum(values) / len(values),
                "min": lambda: min(values), "max": lambda: max(values),
                "tail": lambda: sum(kept) / len(kept)}  # fmt: skip
    require(how in reducers, f"reduce={how!r} is not one of last, first, delta, mean, min, max, tail")
    return reducers[how]()


def chance_corrected(accuracy: float, chance: float) -> float:
    """Skill above guessing, ``s = (acc - c) / (1 - c)`` with ``c = 1/k`` (METHODS.md section 3)."""
    return (accuracy - chance) / (1 - chance)


def guess_share(accuracy: float, chance: float) -> float:
    """Share of correct answers that random guesses account for: ``c (1 - s) / acc``."""
    if accuracy <= 0:
        return math.nan
    return chance * (1 - chance_corrected(accuracy, chance)) / accuracy


def metric_value(scalars: dict[str, Series], metric: Metric) -> float:
    value = reduce_series(scalars.get(metric.name, []), metric.reduce, metric.tail)
    if metric.minus is not None:
        return value - reduce_series(scalars.get(metric.minus, []), metric.reduce, metric.tail)
    if metric.transform == "chance_corrected":
        return chance_corrected(value, metric.chance)
    if metric.transform == "guess_share":
        return guess_share(value, metric.chance)
    return value


def metric_se(scalars: dict[str, Series], metric: Metric) -> float:
    """The run's prompt-sampling SE of ``metric`` from its companion ``metric.se`` (last value), scaled
    as the transform scales the metric; NaN without one."""
    if metric.se is None:
        return math.nan
    se = reduce_series(scalars.get(metric.se, []), "last")
    if metric.transform == "chance_corrected":
        return se / (1 - metric.chance)
    return se if metric.transform == "none" else math.nan


def collect(exp: Experiment, runs: list[Run], metrics: tuple[Metric, ...] | None = None) -> list[RunRecord]:
    """Status, reduced metric values (``metrics``, default: the experiment's) and curve series of every
    run (failed runs: no values)."""
    metrics = exp.all_metrics() if metrics is None else metrics
    curve_names = sorted(
        {m for c in exp.curves for m in c.metrics} | {X_METRICS[c.x] for c in exp.curves if c.x in X_METRICS}
    )
    records = []
    for run in runs:
        status = read_status(run.run_dir)
        if status is None or status.get("args") != list(run.args):
            records.append(RunRecord(run, "missing"))
            continue
        record = RunRecord(run, status["status"], status.get("returncode"), status.get("seconds"))
        if record.status == "done":
            scalars = read_scalars(run.events_dir)
            record.values = {m.key: metric_value(scalars, m) for m in metrics}
            record.se = {m.key: metric_se(scalars, m) for m in metrics if m.se is not None}
            record.series = {name: scalars.get(name, []) for name in curve_names}
        records.append(record)
    return records
