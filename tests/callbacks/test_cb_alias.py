"""The repository's top-level ``callbacks`` is the older spelling of ``lit_grpo.callbacks``: the same modules."""

import importlib
import pkgutil
from pathlib import Path

import lit_grpo.callbacks
from lit_grpo.cli import LitGRPOCLI, _callbacks_alias_available

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
    assert _callbacks_alias_available()  # in a clone, so the CLI lets configs say callbacks.X


def test_a_config_in_the_older_spelling_builds_the_same_classes(monkeypatch):
    monkeypatch.chdir(ROOT)
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--trainer.callbacks=[]",
                           "--trainer.callbacks+=callbacks.HeldOutReport",
                           "--trainer.callbacks+=callbacks.degeneracy.DegeneracyMonitor"], run=False)
    found = [type(c) for c in cli.trainer.callbacks]
    assert lit_grpo.callbacks.HeldOutReport in found and lit_grpo.callbacks.DegeneracyMonitor in found
