"""Experiment configs: what they may name, quick-mode overrides, and errors that name the fix."""

import glob
from pathlib import Path
from typing import ClassVar

import pytest
from lightning import Callback

import lit_grpo.callbacks
from lit_grpo.components import resolve
from lit_grpo.estimators import AdvantageEstimator
from lit_grpo.lab.loader import callback_paths, load_experiment
from lit_grpo.lab.registry import check_metric, declared_metrics, metric_sources
from lit_grpo.lab.spec import DEFAULT_SEED_ARGS
from tests.lab.helpers import ROOT, write_experiment

CALLBACKS = [f"lit_grpo.callbacks.{name}" for name in lit_grpo.callbacks.__all__]


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


class _LoudDegeneracy(lit_grpo.callbacks.DegeneracyMonitor):
    metrics: ClassVar[tuple[str, ...]] = ("rollout/loudness",)


def test_declared_metrics_are_inherited_along_the_mro():
    from lit_grpo.module import GRPOModule
    from lit_grpo.sft import SFTModule

    assert declared_metrics(SFTModule)[:1] == ["train/loss"] and "val/accuracy" in declared_metrics(SFTModule)
    assert {"rollout/reward_mean", "val/accuracy"} <= set(declared_metrics(GRPOModule))
    loud = declared_metrics(_LoudDegeneracy)
    assert loud[0] == "rollout/loudness" and "rollout/degenerate_frac" in loud
    path = f"{__name__}._LoudDegeneracy"
    assert metric_sources("rollout/loudness", [path]) == [path]  # credited to the class that declares it
    assert metric_sources("rollout/all_wrong_frac", [path]) == ["lit_grpo.callbacks.degeneracy.DegeneracyMonitor"]


def test_every_callback_declares_its_metrics_as_data():
    for name in lit_grpo.callbacks.__all__:
        cls = getattr(lit_grpo.callbacks, name)
        if issubclass(cls, Callback):
            declared = vars(cls).get("metrics")
            assert isinstance(declared, tuple) and all(isinstance(m, str) and "/" in m for m in declared), name


EXPERIMENTS = sorted(glob.glob(str(ROOT / "experiments" / "*.yaml")))


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: Path(p).stem)
def test_every_metric_a_committed_experiment_names_is_declared(path):
    exp = load_experiment(path)
    names = {m.name for m in exp.all_metrics()} | {m for c in exp.curves for m in c.metrics}
    names |= {m.se for m in exp.metrics if m.se} | {m.minus for m in exp.metrics if m.minus}
    assert names
    for name in names:
        assert metric_sources(name, exp.callbacks), f"{path}: {name} is declared by no module or callback it names"


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("rollout/reward_mean", "lit_grpo.module.GRPOModule"),
        ("rollout/degenerate_iid_pred", "lit_grpo.callbacks.degeneracy.DegeneracyMonitor"),
        ("val/pass@16", "lit_grpo.callbacks.passk.PassAtK"),
        ("budget/share_0.0-0.2", "lit_grpo.callbacks.budget.GradientBudget"),
        ("grad/sigma_4", "lit_grpo.callbacks.gradient_rank.GradientRank"),
        ("heldout/accuracy_after", "lit_grpo.callbacks.heldout.HeldOutReport"),
    ],
)
def test_documented_metrics_resolve_to_their_writer(name, source):
    assert source in metric_sources(name, CALLBACKS)


def test_undocumented_metric_is_refused_with_close_names():
    with pytest.raises(
        ValueError,
        match=r"where: metric 'rollout/degenerate_fraction' is not documented.*"
        r"rollout/degenerate_frac",
    ):
        check_metric("rollout/degenerate_fraction", "where", CALLBACKS)


def test_estimators_resolve_by_short_name_and_class_path():
    from lit_grpo.estimators import Sign, SoftmaxGRPO

    assert resolve(AdvantageEstimator, "Sign", "x") is Sign
    assert resolve(AdvantageEstimator, "lit_grpo.estimators.softmax.SoftmaxGRPO", "x") is SoftmaxGRPO
    with pytest.raises(ValueError, match="x: unknown AdvantageEstimator 'Sgn'; choose one of .*Sign"):
        resolve(AdvantageEstimator, "Sgn", "x")
    with pytest.raises(ValueError, match="'lit_grpo.GRPOModule' is not a concrete AdvantageEstimator subclass"):
        resolve(AdvantageEstimator, "lit_grpo.GRPOModule", "x")


def test_a_valid_config_loads(tmp_path):
    exp = load_experiment(write_experiment(tmp_path / "e.yaml"))
    assert [a.label for a in exp.arms] == ["GRPO", "Sign"]
    assert exp.arms[1].estimator == "Sign" and exp.arms[0].configs == ("configs/estimators/grpo.yaml",)
    assert exp.seeds == (0, 1) and exp.seed_args == DEFAULT_SEED_ARGS and not exp.quick
    assert exp.metrics[0].key == "rollout/reward_mean (mean)"


def test_quick_mode_overrides_seeds_sweep_and_appends_args(tmp_path):
    path = write_experiment(
        tmp_path / "e.yaml",
        sweep={"lr": {"1e-4": ["--model.optim.lr=1e-4"], "3e-4": ["--model.optim.lr=3e-4"]}},
        quick={"seeds": [7], "args": ["--trainer.max_steps=2"], "sweep": {"lr": ["3e-4"]}},
    )
    full, quick = load_experiment(path), load_experiment(path, quick=True)
    assert [lbl for lbl, _ in full.sweep[0][1]] == ["1e-4", "3e-4"]
    assert quick.sweep == (("lr", (("3e-4", ("--model.optim.lr=3e-4",)),)),)
    assert (
        quick.seeds == (7,)
        and quick.args == ("--model.group_size=4", "--trainer.max_steps=2")
        and quick.quick
    )


def test_quick_mode_may_keep_a_subset_of_the_arms(tmp_path):
    arms = {"GRPO": {"estimator": "GRPO"}, "Sign": {"estimator": "Sign"}, "DrGRPO": {"estimator": "DrGRPO"}}
    path = write_experiment(tmp_path / "e.yaml", arms=arms, reference="Sign", quick={"arms": ["DrGRPO", "Sign"]})
    assert [a.label for a in load_experiment(path).arms] == ["GRPO", "Sign", "DrGRPO"]
    assert [a.label for a in load_experiment(path, quick=True).arms] == ["Sign", "DrGRPO"]  # the experiment's order
    for bad, message in ((["GRPO"], "must include the reference arm 'Sign'"), (["Nope"], "must be a non-empty list"),
                         ("Sign", "must be a non-empty list")):
        path = write_experiment(tmp_path / "f.yaml", arms=arms, reference="Sign", quick={"arms": bad})
        with pytest.raises(ValueError, match=f"quick.arms: .*{message}"):
            load_experiment(path, quick=True)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"arms": {"X": {"estimator": "Bogus"}}}, r"arms\.X\.estimator: unknown AdvantageEstimator 'Bogus'"),
        (
            {"arms": {"X": {"config": ["configs/quickstart.yaml", "nope.yaml"]}}},
            r"config file 'nope.yaml' does not exist",
        ),
        ({"metrics": ["rollout/bogus"]}, r"metrics\[0\]: metric 'rollout/bogus' is not documented"),
        ({"metrics": [{"name": "val/accuracy", "reduce": "median"}]}, r"reduce: 'median' is not one of"),
        (
            {"metrics": [{"name": "val/accuracy", "transform": "chance_corrected"}]},
            r"needs chance in \(0, 1\)",
        ),
        ({"arms": {"a b": {}}}, r"label 'a b' must be letters"),
        ({"bogus_key": 1}, r"unknown key\(s\) \['bogus_key'\]"),
        ({"seeds": [1, 1]}, r"must be distinct integers"),
        (
            {"args": ["--model.model={prepared.policy}"]},
            r"\{prepared.policy\} is used but `prepare` defines only \[\]",
        ),
        ({"prepare": {"p": {"command": ["fit", "--config", "x.yaml"]}}}, r"containing \{output\}"),
        (
            {"args": ["--trainer.callbacks+=lit_grpo.callbacks.PassAtK"],
             "profiles": [{"metrics": ["val/pass@1", "val/pass@2"], "x": [1]}]},
            r"one position per metric",
        ),
        ({"metrics": ["val/pass@1"]}, r"metrics\[0\]: metric 'val/pass@1' is not documented by the GRPO module or a "
                                      r"callback the experiment names .*--trainer.callbacks\+=lit_grpo.callbacks.PassAtK"),
    ],
)
def test_bad_configs_fail_with_the_key_and_the_fix(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        load_experiment(write_experiment(tmp_path / "e.yaml", **overrides))


def test_callbacks_named_by_configs_and_arguments_are_found(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("trainer:\n  callbacks:\n    - {class_path: lit_grpo.callbacks.GradientBudget}\n")
    args = ("--trainer.callbacks+=lit_grpo.callbacks.DegeneracyMonitor", "--model.optim.lr=1e-4",
            '--trainer.callbacks+={"class_path": "lit_grpo.callbacks.GradientRank", "init_args": {"every_n_steps": 10}}')
    assert callback_paths(("configs/quickstart.yaml", str(overlay)), args) == (
        "lit_grpo.callbacks.HeldOutReport", "lit_grpo.callbacks.GradientBudget", "lit_grpo.callbacks.DegeneracyMonitor", "lit_grpo.callbacks.GradientRank"
    )


def test_an_overlay_naming_an_unknown_estimator_fails(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("model:\n  init_args:\n    estimator: {class_path: lit_grpo.Signn}\n")
    with pytest.raises(
        ValueError, match=r"arms\.X \(.*overlay.yaml\): 'lit_grpo.Signn' cannot be imported"
    ):
        load_experiment(write_experiment(tmp_path / "e.yaml", arms={"X": {"config": [str(overlay)]}}))


def test_invalid_yaml_is_a_clear_error(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("name: x\nruntime: about 7 minutes: measured\n")
    with pytest.raises(ValueError, match=r"e.yaml: not valid YAML"):
        load_experiment(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_experiment(tmp_path / "missing.yaml")
