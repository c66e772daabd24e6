"""Every committed experiment config checks out in full and quick mode without running anything."""

import glob
from pathlib import Path

import pytest
import yaml

from lit_grpo.cli import LitGRPOCLI
from lit_grpo.commands.compare_check import check_runs
from lit_grpo.lab.grid import expand, expand_selection, standin_choice
from lit_grpo.lab.loader import load_experiment
from lit_grpo.lab.runner import prepared_outputs
from tests.lab.helpers import ROOT

EXPERIMENTS = sorted(str(Path(p).relative_to(ROOT)) for p in glob.glob(f"{ROOT}/experiments/*.yaml"))
PREPARE = sorted(str(Path(p).relative_to(ROOT)) for p in glob.glob(f"{ROOT}/experiments/prepare/*.yaml"))


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_the_suite_covers_the_six_claims():
    names = {Path(p).stem for p in EXPERIMENTS}
    assert {
        "degeneracy",
        "sign_vs_drgrpo",
        "softmax_budget",
        "gradient_rank",
        "sign_starvation",
        "sign_balance_skill",
        "passk_crossing",
    } <= names


@pytest.mark.parametrize("path", EXPERIMENTS)
def test_first_lines_give_the_command_and_hardware(path):
    first, second = (ROOT / path).read_text().splitlines()[:2]
    assert first.startswith(f"# lit-grpo compare --config {path}")
    assert second.startswith("# Hardware:")


@pytest.mark.parametrize("path", EXPERIMENTS)
@pytest.mark.parametrize("quick", [False, True])
def test_experiment_checks_out(path, quick, tmp_path):
    exp = load_experiment(path, quick=quick)
    assert exp.runtime and exp.claim
    prepared = prepared_outputs(exp, tmp_path)
    selection = expand_selection(exp, prepared, tmp_path)
    if exp.select is not None:  # the selection stage's runs, then the final ones at a stand-in choice
        assert len(check_runs(exp, selection, prepared, LitGRPOCLI, {exp.select.metric.name})) == len(selection) // len(exp.select.seeds)
    runs = expand(exp, prepared, tmp_path, standin_choice(exp, selection))
    cells = check_runs(exp, runs, prepared, LitGRPOCLI)
    assert len(cells) == len(runs) // len(exp.seeds)
    if quick:  # smoke size: a few runs of a few steps (the last value given wins)
        steps = [
            [int(a.split("=")[1]) for a in r.args if a.startswith("--trainer.max_steps=")][-1]
            for r in runs + selection
        ]
        assert len(runs) <= 10 and len(selection) <= 10 and max(steps) <= 3


@pytest.mark.parametrize("path", PREPARE)
def test_prepare_configs_build(path, tmp_path):
    first = (ROOT / path).read_text().splitlines()[0]
    assert first.startswith(f"# lit-grpo fit --config {path}")
    cli = LitGRPOCLI(
        args=[
            "--config",
            path,
            "--trainer.callbacks+=lit_grpo.callbacks.SavePretrained",
            f"--trainer.callbacks.dirpath={tmp_path}",
        ],
        run=False,
    )
    (saver,) = [c for c in cli.trainer.callbacks if type(c).__name__ == "SavePretrained"]
    assert saver.dirpath == str(tmp_path)
    assert yaml.safe_load((ROOT / path).read_text())["model"]["class_path"] == "lit_grpo.SFTModule"
