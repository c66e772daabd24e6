"""The selection stage of a two-stage experiment: each arm's value of one sweep axis (e.g. the learning
rate) chosen by the best mean of a validation metric over seeds of its own."""

from __future__ import annotations

import math

from lit_grpo.checks import require
from lit_grpo.lab.collect import RunRecord
from lit_grpo.lab.grid import Choice, without_axis
from lit_grpo.lab.markdown import fmt, md_head, md_row
from lit_grpo.lab.spec import Experiment


def selection_table(
    exp: Experiment, records: list[RunRecord]
) -> dict[tuple[str, str], dict[str, list[float]]]:
    """``(arm, setting without the axis) -> {value label: the finished runs' metric values}``."""
    sel = exp.select
    labels = [lbl for lbl, _ in dict(exp.sweep)[sel.axis]]
    table: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in records:
        value = dict(r.run.setting)[sel.axis]
        cell = table.setdefault(
            (r.run.arm, without_axis(r.run.setting, sel.axis)), {lbl: [] for lbl in labels}
        )
        v = r.values.get(sel.metric.key, math.nan) if r.status == "done" else math.nan
        if math.isfinite(v):
            cell[value].append(v)
    return table


def select_choice(exp: Experiment, records: list[RunRecord]) -> Choice:
    """The chosen value per arm and setting: the best mean (``max`` or ``min``), ties to the first value
    in sweep order; a ValueError when an arm has no finished selection run in a setting."""
    best = max if exp.select.mode == "max" else min
    choice = {}
    for key, by_value in selection_table(exp, records).items():
        means = {lbl: sum(v) / len(v) for lbl, v in by_value.items() if v}
        require(bool(means),
                f"{exp.name}: arm {key[0]} has no finished selection run at {key[1]}; see the logs under "
                f"the select/ directory and rerun")
        top = best(means.values())
        choice[key] = next(lbl for lbl, m in means.items() if m == top)
    return choice


def selection_section(exp: Experiment, records: list[RunRecord], choice: Choice) -> list[str]:
    """Markdown: per arm and setting, the selection metric's mean (n) at each value, the choice in bold."""
    sel = exp.select
    labels = [lbl for lbl, _ in dict(exp.sweep)[sel.axis]]
    head = ["arm", "setting", *[f"{sel.axis}={lbl}" for lbl in labels], "chosen"]
    lines = [
        f"Each arm's `{sel.axis}` was chosen by the {'highest' if sel.mode == 'max' else 'lowest'} mean of "
        f"`{sel.metric.key}` over the selection seeds {list(sel.seeds)} (runs of their own, under "
        f"`select/`); the experiment's seeds {list(exp.seeds)} then ran at the chosen value only, and the "
        "test split was scored in those runs alone.",
        "",
        *md_head(head),
    ]
    for (arm, setting), by_value in selection_table(exp, records).items():
        cells = []
        for lbl in labels:
            v = by_value[lbl]
            text = f"{fmt(sum(v) / len(v))} (n={len(v)})" if v else "n/a"
            cells.append(f"**{text}**" if choice.get((arm, setting)) == lbl else text)
        lines.append(md_row([arm, setting, *cells, f"{sel.axis}={choice.get((arm, setting), 'n/a')}"]))
    return lines
