"""Every committed experiment at smoke size (``--quick``), end to end: 6 to 12 minutes on 2 CPU cores, so it
runs when ``LIT_GRPO_QUICK_SUITE=1`` is set (CI) and is skipped otherwise."""

import csv
import glob
import json
import os
from pathlib import Path

import pytest

from lit_grpo.commands.compare import compare
from tests.experiments.helpers import ROOT

EXPERIMENTS = sorted(str(Path(p).relative_to(ROOT)) for p in glob.glob(f"{ROOT}/experiments/*.yaml"))


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("LIT_GRPO_QUICK_SUITE") != "1", reason="set LIT_GRPO_QUICK_SUITE=1 to run it"
)
def test_quick_suite(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert compare(["--quick", "--root", str(tmp_path), "--config", *EXPERIMENTS]) == 0
    for path in EXPERIMENTS:
        out = tmp_path / f"{Path(path).stem}-quick"
        results = json.loads((out / "results.json").read_text())
        assert results["runs"] and all(r["status"] == "done" for r in results["runs"])
        assert (out / "report.md").is_file() and list((out / "figures").glob("*.png"))
    # after a selection stage the report shows each arm at its chosen lr, whether written by the run or rebuilt
    out = tmp_path / "sign_starvation-quick"
    chosen = {row["arm"]: float(row["chosen"].removeprefix("lr=")) for row in csv.DictReader(open(out / "runs.csv"))}
    assert len(chosen) == 5
    for argv in ([], ["--report-only"]):
        if argv:
            assert compare(["--quick", "--root", str(tmp_path), "--config", "experiments/sign_starvation.yaml",
                                 *argv]) == 0
        assert _arms_lr(out / "report.md") == chosen


def _arms_lr(report: Path) -> dict[str, float]:
    """Each arm's lr in the report's "Arms as resolved" table."""
    text = report.read_text()
    table = text[text.index("## Arms as resolved") : text.index("## Pairing")]
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    header = [c.strip() for c in rows[0]]
    return {r[header.index("arm")].strip(): float(r[header.index("lr")]) for r in rows[1:]}
