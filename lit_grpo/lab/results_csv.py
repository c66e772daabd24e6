"""Per-run results as a small CSV (``runs.csv``, and ``select.csv`` for a selection stage): one row per
run with its arm, setting, seed, status and every reported value, so that a report's numbers can be
recomputed without the run directories (``lit-grpo compare --report-only --from-csv``)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from lit_grpo.checks import require
from lit_grpo.lab.collect import RunRecord
from lit_grpo.lab.grid import Run
from lit_grpo.lab.spec import Experiment, Metric

RUNS_CSV = "runs.csv"
SELECT_CSV = "select.csv"
_FIXED = ["experiment", "arm", "setting", "chosen", "seed", "status", "seconds"]
_SE = "prompt-sampling SE: "


def _parse_setting(label: str) -> tuple[tuple[str, str], ...]:
    if label in ("", "default"):
        return ()
    return tuple(tuple(part.split("=", 1)) for part in label.split(","))  # type: ignore[misc]


def _num(x: float | None) -> str:
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else repr(float(x))


def write_runs_csv(
    exp: Experiment, records: list[RunRecord], path: Path, metrics: tuple[Metric, ...]
) -> Path:
    """One row per run: the fixed columns, each metric's value, then each SE (empty when not measured)."""
    keys = [m.key for m in metrics]
    se_keys = [m.key for m in metrics if m.se is not None or m.prompts is not None]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(_FIXED + keys + [_SE + k for k in se_keys])
        for r in records:
            chosen = ",".join(f"{a}={lbl}" for a, lbl in r.run.chosen)
            fixed = [exp.name, r.run.arm, r.run.setting_label, chosen, r.run.seed, r.status, _num(r.seconds)]
            w.writerow(fixed + [_num(r.values.get(k)) for k in keys] + [_num(r.se.get(k)) for k in se_keys])
    return path


def read_runs_csv(exp: Experiment, path: str | Path) -> list[RunRecord]:
    """Records from a ``runs.csv`` (no curves: those need the run directories). Metrics of the config
    that the file lacks are NaN; a file of another experiment is refused."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--from-csv {str(path)!r} does not exist")
    records = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            missing = [c for c in _FIXED if c not in row]
            require(not missing, f"{path}: not a runs.csv of lit-grpo compare (no column(s) {missing})")
            require(row["experiment"] == exp.name,
                    f"{path}, row {i + 2}: experiment {row['experiment']!r}, but the config is {exp.name!r}")
            setting = _parse_setting(row["setting"])
            run = Run(row["arm"], setting, int(row["seed"]), (), path.parent, _parse_setting(row["chosen"]))
            values = {k: float(v) for k, v in row.items() if k not in _FIXED and not k.startswith(_SE) and v}
            se = {k[len(_SE) :]: float(v) for k, v in row.items() if k.startswith(_SE) and v}
            seconds = float(row["seconds"]) if row["seconds"] else None
            records.append(RunRecord(run, row["status"], None, seconds, values, se))
    return records
