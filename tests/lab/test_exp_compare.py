"""``lit-grpo compare`` end to end: two estimators x two seeds plus a crashing arm, the report's files and
numbers against the run directories, resume, and configs refused before anything runs."""

import csv
import json
import re
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lit_grpo.commands import main
from lit_grpo.commands.compare import compare
from lit_grpo.lab.markdown import fmt
from lit_grpo.lab.stats import summarize
from tests.lab.helpers import ROOT, SMALL, write_experiment

CRASH = """
from lightning import Callback


class Crash(Callback):
    def on_train_start(self, trainer, pl_module):
        raise RuntimeError("deliberate crash for the test")
"""
METRICS = [
    {"name": "rollout/reward_mean", "reduce": "mean"},
    {"name": "heldout/accuracy_after", "reduce": "last"},
    {"name": "val/accuracy", "reduce": "last", "test_against": 0.0},
]


@pytest.fixture
def experiment(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "crashmod.py").write_text(CRASH)
    monkeypatch.syspath_prepend(str(tmp_path))  # the config check imports it here, the runs in their process
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{':'.join(sys.path)}")
    arms = {
        "GRPO": {"estimator": "GRPO"},
        "Sign": {"config": ["configs/estimators/sign.yaml"]},
        "Broken": {"estimator": "GRPO", "args": ["--trainer.callbacks+=crashmod.Crash"]},
    }
    curves = [{"metrics": ["rollout/reward_mean"]}, {"metrics": ["rollout/reward_mean"], "x": "tokens"}]
    return write_experiment(tmp_path / "exp.yaml", args=SMALL, arms=arms, metrics=METRICS, curves=curves)


def _events(run_dir) -> EventAccumulator:
    (events_dir,) = [p for p in (run_dir / "tb").iterdir()]
    (path,) = list(events_dir.glob("events*"))
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


@pytest.mark.slow
def test_compare_end_to_end(experiment, tmp_path, capsys):
    root = tmp_path / "out"
    status = main(["compare", "--config", str(experiment), "--root", str(root), "--jobs", "2"])
    assert status == 1  # a run failed; the report is written all the same
    out_dir = root / "tiny"
    report = (out_dir / "report.md").read_text()
    results = json.loads((out_dir / "results.json").read_text())
    assert (out_dir / "figures" / "curve_0.png").stat().st_size > 0

    by_id = {r["id"]: r for r in results["runs"]}
    assert {i for i, r in by_id.items() if r["status"] == "done"} == {
        "GRPO/default/seed0",
        "GRPO/default/seed1",
        "Sign/default/seed0",
        "Sign/default/seed1",
    }
    for seed in (0, 1):  # the crash is reported as failed with its log path, which holds the error
        broken = by_id[f"Broken/default/seed{seed}"]
        assert broken["status"] == "failed" and broken["log"] in report
        assert "deliberate crash for the test" in open(broken["log"]).read()

    for arm in ("GRPO", "Sign"):  # the report's numbers are the run directories' numbers
        means = []
        for seed in (0, 1):
            run = by_id[f"{arm}/default/seed{seed}"]
            acc = _events(root / "tiny" / "runs" / arm / "default" / f"seed{seed}")
            rewards = {e.step: e.value for e in acc.Scalars("rollout/reward_mean")}
            assert run["values"]["rollout/reward_mean (mean)"] == pytest.approx(
                sum(rewards.values()) / len(rewards)
            )
            assert run["values"]["heldout/accuracy_after (last)"] == pytest.approx(
                acc.Scalars("heldout/accuracy_after")[-1].value
            )
            means.append(run["values"]["rollout/reward_mean (mean)"])
        s = summarize(means)
        assert re.search(
            rf"\| default \| {arm} \| 2 \| {re.escape(fmt(s['mean']))} \| {re.escape(fmt(s['sd']))} \|",
            report,
        )
    assert "| default | Broken | 0 | n/a" in report  # no values, two failures
    # the arms share seeds: paired tests, and the family of tests adjusted together
    assert "Paired by seed" in report and "p (paired t)" in report and "p (sign flip, exact)" in report
    assert "p (sign flip)" in report  # the one-sample tests of val/accuracy
    assert "The family of tests: " in report and "Holm" in report
    assert "lit-grpo compare --config" in report and "OMP_NUM_THREADS=1 lit-grpo fit --config" in report
    # the arms differ in the estimator only: prompts, sampling seeds and first completions are shared
    assert "| GRPO @ default | Sign @ default | yes | yes | yes |" in report
    # the reward against the completion tokens generated, compared at the budget every run reached
    assert (out_dir / "figures" / "curve_1.png").stat().st_size > 0
    assert "## At matched compute\n\n### rollout/reward_mean" in report
    assert re.search(r"\| default \| rollout/reward_mean \| \d+ \| GRPO \| 2 \|", report)

    # runs.csv holds every run's values; the report's tables rebuild from it alone
    rows = list(csv.DictReader(open(out_dir / "runs.csv")))
    assert len(rows) == 6 and {r["status"] for r in rows} == {"done", "failed"}
    for row in rows:
        run = by_id[f"{row['arm']}/{row['setting']}/seed{row['seed']}"]
        for key, value in run["values"].items():
            assert (float(row[key]) if row[key] else None) == (pytest.approx(value) if value is not None else None)
    rebuilt = tmp_path / "rebuilt"
    args = ["--config", str(experiment), "--root", str(rebuilt), "--report-only", "--from-csv", str(out_dir / "runs.csv")]
    assert compare(args) == 0
    tables = (rebuilt / "tiny" / "report.md").read_text()
    section = report[report.index("## Metrics") : report.index("## Figures")]
    assert section.replace(str(root), "") in tables.replace(str(rebuilt), "")
    assert compare(["--config", str(experiment), "--root", str(root), "--report-only",
                         "--publish", str(tmp_path / "docs")]) == 1  # fmt: skip
    published = tmp_path / "docs" / "tiny"
    assert (published / "runs.csv").read_text() == (out_dir / "runs.csv").read_text()
    assert (published / "report.md").is_file() and (published / "figures" / "curve_0.png").is_file()
    # the published copy holds no path of this machine: the absolute --root is written as the default root
    local, copy = (out_dir / "report.md").read_text(), (published / "report.md").read_text()
    assert str(root) in local and str(root) not in copy
    assert copy == local.replace(f"{root}/", "runs/experiments/")

    # resumed: finished runs are skipped, failed ones left alone with --skip-failed
    capsys.readouterr()
    assert compare(["--config", str(experiment), "--root", str(root), "--skip-failed"]) == 1
    assert "6 runs: 6 already finished (skipped), 0 to run" in capsys.readouterr().out
    assert json.loads((out_dir / "results.json").read_text())["runs"] == results["runs"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"arms": {"A": {"estimator": "GRPO"}, "B": {"estimator": "Signn"}}}, "unknown AdvantageEstimator 'Signn'"),
        ({"metrics": ["val/acuracy"]}, "metric 'val/acuracy' is not documented"),
        ({"args": ["--model.group_sizes=4"]}, "its config does not build"),
    ],
)
def test_bad_experiments_fail_before_any_run(tmp_path, monkeypatch, capsys, overrides, message):
    monkeypatch.chdir(ROOT)
    path = write_experiment(tmp_path / "exp.yaml", **overrides)
    assert compare(["--config", str(path), "--root", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_commands_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    path = write_experiment(tmp_path / "exp.yaml")
    assert compare(["--config", str(path), "--root", str(tmp_path / "out"), "--dry-run"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("OMP_NUM_THREADS=")]
    assert len(lines) == 4 and not (tmp_path / "out").exists()
