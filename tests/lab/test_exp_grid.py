"""The grid: one command per arm x setting x seed; prepare outputs; resume markers; config checks."""

import json
from pathlib import Path

import pytest

from lit_grpo.cli import LitGRPOCLI
from lit_grpo.commands.compare_check import check_runs
from lit_grpo.lab import child, runner
from lit_grpo.lab.grid import expand, out_dir, prepare_output, substitute
from lit_grpo.lab.loader import load_experiment
from lit_grpo.lab.runner import STATUS_FILE, needs_run, prepared_outputs
from lit_grpo.lab.spec import Prepare
from tests.lab.helpers import ROOT, write_experiment

SWEEP = {"lr": {"1e-4": ["--model.optim.lr=1e-4"], "3e-4": ["--model.optim.lr=3e-4"]}}


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_expand_orders_seeds_settings_arms_and_builds_commands(tmp_path):
    exp = load_experiment(write_experiment(tmp_path / "e.yaml", sweep=SWEEP))
    runs = expand(exp, {}, tmp_path / "root")
    assert [r.run_id for r in runs[:4]] == [  # a grid stopped part-way has matched arms per seed
        "GRPO/lr=1e-4/seed0",
        "Sign/lr=1e-4/seed0",
        "GRPO/lr=3e-4/seed0",
        "Sign/lr=3e-4/seed0",
    ]
    assert len(runs) == 8
    grpo, sign = runs[0].args, runs[-1].args
    assert grpo[:5] == (
        "fit",
        "--config",
        "configs/quickstart.yaml",
        "--config",
        "configs/estimators/grpo.yaml",
    )
    assert "--model.estimator=Sign" in sign and "--model.optim.lr=3e-4" in sign
    assert (
        sign.index("--model.group_size=4") < sign.index("--model.optim.lr=3e-4") < sign.index("--seed_everything=1")
    )
    assert "--data.seed=1" in sign
    assert runs[-1].run_dir == out_dir(exp, tmp_path / "root") / "runs" / "Sign" / "lr=3e-4" / "seed1"
    assert f"--trainer.logger.init_args.save_dir={runs[-1].run_dir}" in sign
    assert runs[-1].events_dir == runs[-1].run_dir / "tb" / "version_0"


def test_estimator_init_args_become_one_json_argument(tmp_path):
    arms = {"Soft": {"estimator": "SoftmaxGRPO", "init_args": {"tau": 0.3}}}
    (run, *_) = expand(load_experiment(write_experiment(tmp_path / "e.yaml", arms=arms)), {}, tmp_path)
    (arg,) = [a for a in run.args if a.startswith("--model.estimator=")]
    assert json.loads(arg.split("=", 1)[1]) == {
        "class_path": "lit_grpo.SoftmaxGRPO",
        "init_args": {"tau": 0.3},
    }


def test_quick_mode_writes_elsewhere(tmp_path):
    path = write_experiment(tmp_path / "e.yaml")
    assert out_dir(load_experiment(path), "r") == Path("r/tiny")
    assert out_dir(load_experiment(path, quick=True), "r") == Path("r/tiny-quick")


def test_substitute_fills_placeholders_and_leaves_json_alone():
    text = '{"a": 1} {prepared.p} seed={seed} out={output}'
    assert substitute(text, {"p": Path("/x/p")}, seed=3, output=Path("/o")) == '{"a": 1} /x/p seed=3 out=/o'


def test_prepare_output_depends_on_the_command():
    a, b = Prepare("p", ("fit", "{output}")), Prepare("p", ("fit", "--x=1", "{output}"))
    assert prepare_output(a, False, "r") != prepare_output(b, False, "r")
    assert prepare_output(a, False, "r") == prepare_output(a, False, "r")
    assert prepare_output(a, True, "r").parent.name == "prepared-quick"


def test_prepared_paths_reach_the_runs(tmp_path):
    prepare = {"pol": {"command": ["fit", "--config", "x.yaml", "--trainer.callbacks.dirpath={output}"]}}
    exp = load_experiment(
        write_experiment(tmp_path / "e.yaml", prepare=prepare, args=["--model.model={prepared.pol}"])
    )
    outputs = prepared_outputs(exp, tmp_path)
    assert f"--model.model={outputs['pol']}" in expand(exp, outputs, tmp_path)[0].args


def test_markers_decide_what_runs_again(tmp_path):
    run = expand(load_experiment(write_experiment(tmp_path / "e.yaml")), {}, tmp_path)[0]
    assert needs_run(run)  # never ran
    run.run_dir.mkdir(parents=True)
    marker = run.run_dir / STATUS_FILE
    marker.write_text(json.dumps({"status": "done", "args": list(run.args)}))
    assert not needs_run(run)
    marker.write_text(json.dumps({"status": "done", "args": [*run.args, "--changed"]}))
    assert needs_run(run)  # the config changed since
    marker.write_text(json.dumps({"status": "failed", "args": list(run.args)}))
    assert needs_run(run) and not needs_run(run, retry_failed=False)


def test_check_runs_builds_each_cell_and_reports_the_estimator(tmp_path):
    arms = {
        "NormDrGRPO": {"config": ["configs/estimators/normalized_drgrpo.yaml"]},
        "Sign": {"estimator": "Sign"},
    }
    exp = load_experiment(write_experiment(tmp_path / "e.yaml", arms=arms))
    cells = check_runs(exp, expand(exp, {}, tmp_path), {}, LitGRPOCLI)
    assert list(cells) == [("NormDrGRPO", "default"), ("Sign", "default")]
    assert cells[("NormDrGRPO", "default")].estimator.startswith("GRPO(")
    assert cells[("NormDrGRPO", "default")].aggregation == "seq-sum-constant"
    assert cells[("Sign", "default")].group_size == 4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"args": ["--model.bogus=1"]}, r"run GRPO/default/seed0: its config does not build:(.|\n)*bogus"),
        (  # the GRPO arm names the callback that writes the metric, the Sign arm does not
            {"metrics": ["rollout/degenerate_frac"],
             "arms": {"GRPO": {"config": ["configs/estimators/grpo.yaml"],
                               "args": ["--trainer.callbacks+=lit_grpo.callbacks.DegeneracyMonitor"]},
                      "Sign": {"estimator": "Sign"}}},
            r"written by lit_grpo.callbacks.degeneracy.DegeneracyMonitor, which this run "
            r"does not have",
        ),
        ({"args": ["--model.model=/no/such/model"]}, r"model='/no/such/model' is not a directory"),
    ],
)
def test_check_runs_fails_before_anything_runs(tmp_path, overrides, message):
    exp = load_experiment(write_experiment(tmp_path / "e.yaml", **overrides))
    runs = expand(exp, {}, tmp_path)
    with pytest.raises(ValueError, match=message):
        check_runs(exp, runs, {}, LitGRPOCLI)
    assert not any(r.run_dir.exists() for r in runs)


def test_selection_stage_then_runs_at_each_arms_chosen_value(tmp_path):
    from lit_grpo.lab.collect import RunRecord
    from lit_grpo.lab.grid import expand_selection
    from lit_grpo.lab.select import select_choice, selection_section

    sweep = {"lr": {"1e-4": ["--model.optim.lr=1.0e-4"], "3e-4": ["--model.optim.lr=3.0e-4"]}}
    select = {"axis": "lr", "metric": {"name": "val/reward_mean"}, "seeds": [100, 101]}
    exp = load_experiment(write_experiment(tmp_path / "e.yaml", sweep=sweep, select=select))
    selection = expand_selection(exp, {}, tmp_path)
    assert len(selection) == 2 * 2 * 2 and {r.seed for r in selection} == {100, 101}
    assert all("/select/runs/" in str(r.run_dir) for r in selection)
    key = exp.select.metric.key
    means = {("GRPO", "1e-4"): 0.5, ("GRPO", "3e-4"): 0.4, ("Sign", "1e-4"): 0.3, ("Sign", "3e-4"): 0.6}
    records = [RunRecord(r, "done", values={key: means[r.arm, dict(r.setting)["lr"]]}) for r in selection]
    choice = select_choice(exp, records)
    assert choice == {("GRPO", "default"): "1e-4", ("Sign", "default"): "3e-4"}
    runs = expand(exp, {}, tmp_path, choice)
    assert [r.seed for r in runs] == [0, 0, 1, 1] and {r.setting for r in runs} == {()}
    by_arm = {r.arm: r for r in runs}
    assert "--model.optim.lr=1.0e-4" in by_arm["GRPO"].args and "--model.optim.lr=3.0e-4" in by_arm["Sign"].args
    assert by_arm["Sign"].chosen == (("lr", "3e-4"),) and by_arm["Sign"].run_dir.parent.name == "default"
    table = "\n".join(selection_section(exp, records, choice))
    assert "| Sign | default | 0.3000 (n=2) | **0.6000 (n=2)** | lr=3e-4 |" in table
    with pytest.raises(ValueError, match="depend on the selection stage"):
        expand(exp, {}, tmp_path)
    failed = [RunRecord(r, "failed") if r.arm == "Sign" else RunRecord(r, "done", values={key: 0.5}) for r in selection]
    with pytest.raises(ValueError, match="arm Sign has no finished selection run"):
        select_choice(exp, failed)


def test_selection_seeds_must_differ_from_the_final_seeds(tmp_path):
    sweep = {"lr": {"1e-4": ["--model.optim.lr=1.0e-4"]}}
    bad = {"axis": "lr", "metric": {"name": "val/reward_mean"}, "seeds": [1, 2]}
    with pytest.raises(ValueError, match="overlap the seeds"):
        load_experiment(write_experiment(tmp_path / "e.yaml", sweep=sweep, select=bad))
    with pytest.raises(ValueError, match="must be one of the sweep axes"):
        load_experiment(write_experiment(tmp_path / "f.yaml", sweep=sweep, select={**bad, "axis": "G", "seeds": [9]}))


REQUIRE_CMD = ["fit", "--config", "x.yaml", "--trainer.callbacks.dirpath={output}"]


def _prepared_experiment(tmp_path, require, quick=False):
    prepare = {"pol": {"command": REQUIRE_CMD, "require": require}}
    path = write_experiment(tmp_path / "e.yaml", prepare=prepare, args=["--model.model={prepared.pol}"])
    return load_experiment(path, quick=quick)


def _fake_step(monkeypatch, accuracies):
    """``_call`` standing in for the prepare command: writes the output and logs ``val/accuracy``."""
    from torch.utils.tensorboard import SummaryWriter

    def call(args, log, threads, timeout):
        output = Path(next(a.partition("=")[2] for a in args if a.startswith("--trainer.callbacks.dirpath=")))
        logs = next(a.partition("=")[2] for a in args if a.startswith("--trainer.logger.init_args.save_dir="))
        output.mkdir(parents=True)
        with SummaryWriter(f"{logs}/sft/version_0") as writer:
            for step, acc in enumerate(accuracies):
                writer.add_scalar("val/accuracy", acc, (step + 1) * 50)
        log.write_text("fit done\n")
        return 0, 1.0

    monkeypatch.setattr(child, "call", call)


def test_prepare_requirement_is_parsed_and_checked_in_the_config(tmp_path):
    exp = _prepared_experiment(tmp_path, {"name": "val/accuracy", "reduce": "max", "min": 0.35})
    (step,) = exp.prepare
    assert step.require.describe() == "val/accuracy (max) >= 0.35"
    assert step.require.met(0.35) and not step.require.met(0.349) and not step.require.met(float("nan"))
    for bad, message in [
        ({"name": "val/accuracy"}, "needs `min` and/or `max`"),
        ({"name": "val/accuracy", "min": "high"}, "must be a number"),
        ({"name": "val/acuracy", "min": 0.3}, "not documented"),
        ({"name": "val/accuracy", "min": 0.3, "at": 5}, "at"),
    ]:
        with pytest.raises(ValueError, match=message):
            _prepared_experiment(tmp_path, bad)


def test_a_prepare_step_that_misses_its_requirement_stops_the_experiment(tmp_path, monkeypatch):
    exp = _prepared_experiment(tmp_path, {"name": "val/accuracy", "reduce": "max", "min": 0.35})
    _fake_step(monkeypatch, [0.2, 0.25, 0.22])
    with pytest.raises(RuntimeError, match=r"did not meet its requirement val/accuracy \(max\) >= 0.35: "
                                           r"val/accuracy reached 0.25"):  # fmt: skip
        runner.run_prepare(exp, tmp_path, echo=lambda _: None)
    output = prepared_outputs(exp, tmp_path)["pol"]
    assert output.is_dir() and not (output / runner.PREPARED_FILE).exists()  # kept, and run again next time

    _fake_step(monkeypatch, [0.2, 0.36, 0.3])  # the rerun's log alone counts, not the failed one's
    lines = []
    assert runner.run_prepare(exp, tmp_path, echo=lines.append) == {"pol": output}
    marker = json.loads((output / runner.PREPARED_FILE).read_text())
    assert marker["reached"] == pytest.approx(0.36) and marker["required"] == "val/accuracy (max) >= 0.35"
    assert any("requirement val/accuracy (max) >= 0.35 met (0.36)" in line for line in lines)


def test_a_metric_the_step_never_logged_misses_the_requirement_and_quick_mode_skips_it(tmp_path, monkeypatch):
    exp = _prepared_experiment(tmp_path, {"name": "val/reward_mean", "max": 0.9})
    _fake_step(monkeypatch, [0.5])
    with pytest.raises(RuntimeError, match="val/reward_mean was never logged"):
        runner.run_prepare(exp, tmp_path, echo=lambda _: None)
    quick = _prepared_experiment(tmp_path, {"name": "val/reward_mean", "max": 0.9}, quick=True)
    lines = []
    runner.run_prepare(quick, tmp_path, echo=lines.append)
    assert any("not checked in quick mode" in line for line in lines)


def test_a_model_inside_a_prepared_output_is_not_checked_before_the_step_runs(tmp_path):
    # a prepare step's SavePretrained(merge: true) writes the merged policy under <output>/merged
    out = tmp_path / "prepared" / "start-0123456789"
    exp = load_experiment(write_experiment(tmp_path / "e.yaml", args=[f"--model.model={out}/merged"]))
    check_runs(exp, expand(exp, {"start": out}, tmp_path), {"start": out}, LitGRPOCLI)
    # a sibling whose name only begins like the output is not inside it
    exp = load_experiment(write_experiment(tmp_path / "f.yaml", args=[f"--model.model={out}x/merged"]))
    with pytest.raises(ValueError, match="is not a directory"):
        check_runs(exp, expand(exp, {"start": out}, tmp_path), {"start": out}, LitGRPOCLI)


def test_a_prepare_step_runs_with_every_thread_the_grid_would_share(tmp_path, monkeypatch):
    import sys
    from types import SimpleNamespace

    from lit_grpo.commands import compare as _  # noqa: F401  (the module, not its re-exported function)

    compare = sys.modules["lit_grpo.commands.compare"]

    exp = load_experiment(write_experiment(tmp_path / "e.yaml", threads_per_run=2))
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 8)
    assert compare._prepare_threads(exp, SimpleNamespace(jobs=None), None) == 8  # 4 jobs x 2 threads
    assert compare._prepare_threads(exp, SimpleNamespace(jobs=3), None) == 6
    assert compare._prepare_threads(exp, SimpleNamespace(jobs=None), object()) == 2  # a cluster task: its own
