"""The repository's top-level ``callbacks`` is the older spelling of ``lit_grpo.callbacks``: the same modules."""

import importlib
import pkgutil
import sys
from pathlib import Path

import lit_grpo.callbacks
from lit_grpo.cli import LitGRPOCLI
from lit_grpo.resources import load_callbacks_alias

ROOT = Path(__file__).resolve().parents[2]


def test_the_alias_is_the_package_and_each_submodule_is_the_same_module():
    import callbacks

    assert callbacks is lit_grpo.callbacks
    for info in pkgutil.iter_modules(lit_grpo.callbacks.__path__):
        assert importlib.import_module(f"callbacks.{info.name}") is importlib.import_module(
            f"lit_grpo.callbacks.{info.name}"
        )
    from callbacks.export import SavePretrained

    assert SavePretrained is lit_grpo.callbacks.SavePretrained
    assert load_callbacks_alias()  # in a clone, so the CLI lets configs say callbacks.X


def test_in_a_clone_the_alias_loads_also_where_the_repository_is_not_on_the_path(monkeypatch):
    for name in [n for n in sys.modules if n == "callbacks" or n.startswith("callbacks.")]:
        monkeypatch.delitem(sys.modules, name)  # as for the lit-grpo command of an editable install
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != ROOT])
    assert load_callbacks_alias()
    assert sys.modules["callbacks"] is lit_grpo.callbacks
    assert sys.modules["callbacks.heldout"] is sys.modules["lit_grpo.callbacks.heldout"]


def test_a_config_in_the_older_spelling_builds_the_same_classes(monkeypatch):
    monkeypatch.chdir(ROOT)
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--trainer.callbacks=[]",
                           "--trainer.callbacks+=callbacks.HeldOutReport",
                           "--trainer.callbacks+=callbacks.degeneracy.DegeneracyMonitor"], run=False)
    found = [type(c) for c in cli.trainer.callbacks]
    assert lit_grpo.callbacks.HeldOutReport in found and lit_grpo.callbacks.DegeneracyMonitor in found


def test_an_experiment_naming_the_older_spelling_finds_the_same_class(monkeypatch):
    from lit_grpo.experiments.registry import import_class

    for name in [n for n in sys.modules if n == "callbacks" or n.startswith("callbacks.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != ROOT])
    assert import_class("callbacks.PassAtK") is lit_grpo.callbacks.PassAtK
    assert import_class("callbacks.passk.PassAtK") is lit_grpo.callbacks.PassAtK
