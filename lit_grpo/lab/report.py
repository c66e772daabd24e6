"""The report of a comparison: ``report.md`` (tables, tests, figures, runs, commands), ``results.json``
(every run's reduced values) and ``figures/*.png`` in the experiment's output directory."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from lit_grpo.lab.collect import RunRecord
from lit_grpo.lab.compute import matched_section
from lit_grpo.lab.figures import curve_figure, profile_figure
from lit_grpo.lab.grid import Choice, prepare_args, prepare_output, shell_command, substitute
from lit_grpo.lab.markdown import fmt, md_head, md_row
from lit_grpo.lab.pairing import Pairing, pairing_section
from lit_grpo.lab.results_csv import RUNS_CSV, SELECT_CSV, write_runs_csv
from lit_grpo.lab.runner import PREPARED_FILE
from lit_grpo.lab.select import selection_section
from lit_grpo.lab.spec import Experiment
from lit_grpo.lab.tables import analyse, crossing_section, family_section, metric_section

REPORT_FILE = "report.md"
#: ``lit-grpo compare --root``'s default: where the runs of a report's own command go
DEFAULT_ROOT = "runs/experiments"
RESULTS_FILE = "results.json"
INVOCATIONS_FILE = "invocations.json"


@dataclass(frozen=True)
class CellInfo:
    """What one arm x setting resolves to, for the report (``lit-grpo compare`` reads it from the built
    config:
    :func:`lit_grpo.commands.compare_check.check_runs`)."""

    estimator: str
    aggregation: str
    group_size: int
    lr: float
    model: str
    pairing: Pairing | None = None  # what its runs share with another cell's of the same seed


def compare_command(exp: Experiment) -> str:
    return f"lit-grpo compare --config {exp.path}" + (" --quick" if exp.quick else "")


def _runtime(exp: Experiment, records: list[RunRecord], out: Path) -> list[str]:
    seconds = [r.seconds for r in records if r.seconds is not None]
    done = sum(r.status == "done" for r in records)
    failed = sum(r.status == "failed" for r in records)
    lines = [
        f"- runs: {len(records)} ({done} finished, {failed} failed, {len(records) - done - failed} not run)"
    ]
    if seconds:
        lines.append(
            f"- run time: {sum(seconds) / 60:.1f} min in all, {sum(seconds) / len(seconds):.0f} s per run "
            f"(min {min(seconds):.0f} s, max {max(seconds):.0f} s), each with {exp.threads_per_run} thread(s)"
        )
    path = out / INVOCATIONS_FILE
    for inv in json.loads(path.read_text()) if path.is_file() else []:
        lines.append(
            f"- `{inv['command']}` on {inv['date']}: {inv['ran']} runs in {inv['wall_s'] / 60:.1f} min wall "
            f"time, {inv['jobs']} at a time, {inv['cpus']} CPU cores"
            if isinstance(inv["jobs"], int)
            else f"time, as {inv['jobs']} (the driver has {inv['cpus']} CPU cores)"
        )
    return lines


def _arms(exp: Experiment, cells: dict[tuple[str, str], CellInfo]) -> list[str]:
    if not cells:
        return ["(not resolved: the report was rebuilt from a runs.csv without building the configs)"]
    lines = md_head(["arm", "setting", "estimator", "aggregation", "G", "lr", "starting model"], rule="---")
    for (arm, setting), info in cells.items():
        row = [
            arm,
            setting,
            f"`{info.estimator}`",
            info.aggregation,
            info.group_size,
            f"{info.lr:g}",
            info.model,
        ]
        lines.append(md_row(row))
    return lines


def _figures(exp: Experiment, records: list[RunRecord], out: Path) -> list[str]:
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    drawn = [
        (c.title or ", ".join(c.metrics), curve_figure(exp, c, records, fig_dir / f"curve_{i}.png"))
        for i, c in enumerate(exp.curves)
    ]
    drawn += [
        (p.title or "profile", profile_figure(exp, p, records, fig_dir / f"profile_{i}.png"))
        for i, p in enumerate(exp.profiles)
    ]
    for title, path in drawn:
        if path is None:
            lines.append(f"- {title}: not drawn (matplotlib is not installed: `pip install matplotlib`)")
        else:
            lines += [f"**{title}**", "", f"![{title}]({path.relative_to(out)})", ""]
    return lines


def _runs(records: list[RunRecord]) -> list[str]:
    lines = md_head(["run", "status", "seconds", "log"], rule="---")
    for r in records:
        status = r.status if r.status != "failed" else f"**failed** (exit {r.returncode})"
        secs = "" if r.seconds is None else f"{r.seconds:.0f}"
        lines.append(md_row([r.run.run_id, status, secs, r.run.log_path]))
    return lines


def _commands(exp: Experiment, records: list[RunRecord], root: str | Path) -> list[str]:
    lines = ["```bash", compare_command(exp), "```", ""]
    if exp.prepare:
        lines += ["Prepare steps (run once by the command above, cached):", "", "```bash"]
        for step in exp.prepare:
            output = prepare_output(step, exp.quick, root)
            args = [substitute(a, {}, output=output) for a in prepare_args(step, exp.quick)]
            lines.append(shell_command(args, exp.threads_per_run))
        lines += ["```", ""]
        for step in (s for s in exp.prepare if s.require is not None):
            marker = prepare_output(step, exp.quick, root) / PREPARED_FILE
            reached = json.loads(marker.read_text()).get("reached") if marker.is_file() else None
            if exp.quick:
                state = "not checked (quick mode)"
            else:
                state = "not run yet" if reached is None else f"met: {reached:.4g}"
            lines += [f"Requirement of `{step.name}`: {step.require.describe()}; {state}.", ""]
    lines += ["<details><summary>Every run's command</summary>", "", "```bash"]
    lines += [shell_command(r.run.args, exp.threads_per_run) for r in records]
    return lines + ["```", "", "</details>"]


def _results(exp: Experiment, records: list[RunRecord]) -> dict:
    """``results.json``: every run's status, directories and values."""
    def num(x):
        return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x

    return {
        "experiment": exp.name,
        "config": exp.path,
        "quick": exp.quick,
        "claim": exp.claim,
        "metrics": [m.key for m in exp.metrics],
        "runs": [
            {
                "id": r.run.run_id,
                "arm": r.run.arm,
                "setting": r.run.setting_label,
                "seed": r.run.seed,
                "status": r.status,
                "returncode": r.returncode,
                "seconds": r.seconds,
                "run_dir": str(r.run.run_dir),
                "events_dir": str(r.run.events_dir),
                "log": str(r.run.log_path),
                "chosen": dict(r.run.chosen),
                "values": {k: num(v) for k, v in r.values.items()},
                "prompt_se": {k: num(v) for k, v in r.se.items()},
            }
            for r in records
        ],
    }


def write_report(
    exp: Experiment,
    records: list[RunRecord],
    cells: dict[tuple[str, str], CellInfo],
    out: Path,
    root: str | Path = "runs/experiments",
    selection: tuple[list[RunRecord], Choice] | None = None,
    figures: bool = True,
) -> Path:
    """Write ``report.md``, ``results.json``, ``runs.csv`` (and ``select.csv`` with a selection stage)
    and the figures under ``out``; returns the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    mode = "quick (smoke size: checks the pipeline; the numbers answer nothing)" if exp.quick else "full"
    lines = [
        f"# Experiment `{exp.name}`",
        "",
        f"Claim: {exp.claim}" if exp.claim else "",
        "",
        f"Config: `{exp.path}`; mode: {mode}; seeds: {list(exp.seeds)}.",
        "",
    ]
    if exp.runtime:
        lines += [f"Expected runtime: {exp.runtime}", ""]
    pairings = {key: info.pairing for key, info in cells.items() if info.pairing is not None}
    lines += [
        "## Runtime",
        "",
        *_runtime(exp, records, out),
        "",
        "## Arms as resolved",
        "",
        *_arms(exp, cells),
        "",
        "## Pairing: what the runs of one seed share",
        "",
        *pairing_section(exp, pairings),
        "",
    ]
    if selection is not None:
        lines += ["## Selection stage", "", *selection_section(exp, *selection), ""]
        write_runs_csv(exp, selection[0], out / SELECT_CSV, (exp.select.metric,))
    analysis = analyse(exp, records)
    lines += [
        "## Metrics",
        "",
        "One value per run (the metric reduced over its logged steps as named), summarised "
        "over seeds; n counts finished runs; failed runs are listed under Runs with their logs. "
        f"Every run's values are in `{RUNS_CSV}`.",
        "",
        *family_section(exp, analysis),
    ]
    for mt in analysis.metrics:
        lines += metric_section(exp, mt)
    for profile in exp.profiles:
        if profile.baseline:
            lines += [f"### Crossing: {profile.title or 'profile'}", "",
                      f"Where each run's `{profile.metrics[0]}`.. curve stops being above its baseline "
                      f"`{profile.baseline[0]}`.. (interpolated{' in log2 x' if profile.log2 else ''}); "
                      "'never': still above at the largest x measured.", "",
                      *crossing_section(exp, profile, records), ""]  # fmt: skip
    drawn = _figures(exp, records, out) if figures else []
    if drawn:
        lines += ["## Figures", "", *drawn, ""]
    matched = [c for c in exp.curves if c.x != "step"]
    if matched and any(r.series for r in records):  # curves need the run directories, not a runs.csv
        lines += ["## At matched compute", ""]
        for curve in matched:
            lines += [
                f"### {curve.title or ', '.join(curve.metrics)}",
                "",
                *matched_section(exp, curve, records),
                "",
            ]
    lines += ["## Runs", "", *_runs(records), "", "## Reproduce", "", *_commands(exp, records, root), ""]
    (out / RESULTS_FILE).write_text(json.dumps(_results(exp, records), indent=1))
    write_runs_csv(exp, records, out / RUNS_CSV, exp.all_metrics())
    path = out / REPORT_FILE
    path.write_text("\n".join(lines))
    return path


def publish(out: Path, dest: Path, root: str | Path = DEFAULT_ROOT) -> Path:
    """Copy the report, ``runs.csv`` (and ``select.csv``) and the figures of ``out`` to ``dest`` (e.g.
    ``docs/results/<name>``), so that the numbers quoted from them can be recomputed from the repository. The
    copy holds no path of this machine: an absolute ``root`` is written as :data:`DEFAULT_ROOT`, where the
    report's own ``lit-grpo compare`` command puts the same runs (:func:`portable`)."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for name in (REPORT_FILE, RUNS_CSV, SELECT_CSV):
        if (out / name).is_file():
            (dest / name).write_text(portable((out / name).read_text(), root))
    for fig in sorted((out / "figures").glob("*.png")):
        (dest / "figures").mkdir(exist_ok=True)
        shutil.copy2(fig, dest / "figures" / fig.name)
    return dest


def portable(text: str, root: str | Path) -> str:
    """``text`` with an absolute ``root`` (as given and resolved) written as :data:`DEFAULT_ROOT`."""
    for prefix in dict.fromkeys([str(Path(root)), str(Path(root).resolve())]):
        if Path(prefix).is_absolute() and len(Path(prefix).parts) > 1:  # never "/" itself
            text = text.replace(prefix + "/", DEFAULT_ROOT + "/")
    return text


__all__ = [
    "write_report",
    "publish",
    "compare_command",
    "fmt",
    "REPORT_FILE",
    "RESULTS_FILE",
    "INVOCATIONS_FILE",
]
