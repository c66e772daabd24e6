"""Every committed experiment at smoke size (``--quick``), end to end: 6 to 12 minutes on 2 CPU cores, so it
runs when ``LIT_GRPO_QUICK_SUITE=1`` is set (CI) and is skipped otherwise.

The experiments that need only what the README's install (``scripts/install.sh``) brings run in one grid; each
one that needs another optional extra (``lit_grpo.extras``: reasoning-gym, vLLM, ...) runs on its own and skips,
naming the extra, where it is missing; .ci/run installs the extras and runs the skipped ones again."""

import csv
import glob
import json
import os
import re
from pathlib import Path

import pytest

from lit_grpo import extras
from lit_grpo.commands.compare import compare
from lit_grpo.lab.loader import load_experiment
from tests.lab.helpers import ROOT

EXPERIMENTS = sorted(str(Path(p).relative_to(ROOT)) for p in glob.glob(f"{ROOT}/experiments/*.yaml"))
#: the extras scripts/install.sh installs (the README's install)
README_EXTRAS = set(re.search(r'^extra="([^"]+)"', (ROOT / "scripts/install.sh").read_text(), re.M)[1].split(","))
NEEDS = {path: [e for e in load_experiment(ROOT / path, quick=True).extras if e not in README_EXTRAS]
         for path in EXPERIMENTS}
quick_suite = pytest.mark.skipif(
    os.environ.get("LIT_GRPO_QUICK_SUITE") != "1", reason="set LIT_GRPO_QUICK_SUITE=1 to run it"
)


def _check_outputs(root: Path, paths: list[str]) -> None:
    for path in paths:
        out = root / f"{Path(path).stem}-quick"
        results = json.loads((out / "results.json").read_text())
        assert results["runs"] and all(r["status"] == "done" for r in results["runs"])
        assert (out / "report.md").is_file() and list((out / "figures").glob("*.png"))


@pytest.mark.slow
@quick_suite
def test_quick_suite(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    plain = [p for p in EXPERIMENTS if not NEEDS[p]]
    assert compare(["--quick", "--root", str(tmp_path), "--config", *plain]) == 0
    _check_outputs(tmp_path, plain)
    # after a selection stage the report shows each arm at its chosen lr, whether written by the run or rebuilt
    out = tmp_path / "sign_starvation-quick"
    chosen = {row["arm"]: float(row["chosen"].removeprefix("lr=")) for row in csv.DictReader(open(out / "runs.csv"))}
    assert len(chosen) == 5
    for argv in ([], ["--report-only"]):
        if argv:
            assert compare(["--quick", "--root", str(tmp_path), "--config", "experiments/sign_starvation.yaml",
                                 *argv]) == 0
        assert _arms_lr(out / "report.md") == chosen


@pytest.mark.slow
@quick_suite
@pytest.mark.parametrize("path", [p for p in EXPERIMENTS if NEEDS[p]] or [pytest.param(None, marks=pytest.mark.skip(
    reason="every experiment runs on the README's install"))])
def test_quick_suite_needing_an_extra(path, tmp_path, monkeypatch):
    for extra in extras.missing(NEEDS[path]):
        pytest.skip(f"{path} needs the {extra} extra: {extras.install_hint(extra)}")
    monkeypatch.chdir(ROOT)
    assert compare(["--quick", "--root", str(tmp_path), "--config", path]) == 0
    _check_outputs(tmp_path, [path])


def test_an_experiment_needing_a_missing_extra_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    needing = [p for p in EXPERIMENTS if NEEDS[p]]
    if not needing:
        pytest.skip("no experiment needs an extra beyond the README's install")
    path = needing[0]
    monkeypatch.setattr(extras, "installed", lambda extra: False)
    monkeypatch.chdir(ROOT)
    assert compare(["--quick", "--root", str(tmp_path), "--config", path]) == 2
    err = capsys.readouterr().err
    extra = NEEDS[path][0]
    assert f"need the {extra!r} extra" in err and extras.install_hint(extra) in err and "nothing was run" in err
    assert not any(tmp_path.iterdir())


def _arms_lr(report: Path) -> dict[str, float]:
    """Each arm's lr in the report's "Arms as resolved" table."""
    text = report.read_text()
    table = text[text.index("## Arms as resolved") : text.index("## Pairing")]
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    header = [c.strip() for c in rows[0]]
    return {r[header.index("arm")].strip(): float(r[header.index("lr")]) for r in rows[1:]}
