"""Every task config parses and builds offline (constructors are cheap: nothing is loaded)."""

from pathlib import Path

import pytest

from lit_grpo.cli import LitGRPOCLI
from lit_grpo.data import PromptSource
from lit_grpo.models.sources import BUNDLED
from lit_grpo.rewards import RewardFunction

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs" / "tasks").glob("*.yaml"))


def test_there_are_task_configs():
    names = {p.stem for p in CONFIGS}
    assert {"gsm8k", "math500", "aqua", "poetry", "synthetic_choice", "local_jsonl"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_builds(path, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a logger must not write into the repository
    text = path.read_text()
    assert text.startswith("# lit-grpo fit --config configs/tasks/") and "Hardware:" in text.split("\n", 3)[1]
    cli = LitGRPOCLI(args=["--config", str(path)], run=False)
    assert isinstance(cli.datamodule.source, PromptSource)
    assert isinstance(cli.model.reward, RewardFunction)
    real_model = cli.model.model_name not in BUNDLED
    assert real_model == ("tiny" not in path.stem)  # the tiny shipped policy only in test variants


#: What each hub task fixes itself (its fields and template), so it is no option of the task.
FIXED = {
    "GSM8K": {"prompt_field", "answer_field", "template"},
    "MATH500": {"prompt_field", "template"},
    "ReferenceText": set(),
    "MultipleChoice": {"template"},
}


@pytest.mark.parametrize("name", FIXED)
def test_hub_tasks_list_every_option_they_pass_on(name):
    """A task declares only what differs from HubSource and passes the rest on as keywords; the config schema
    (what LightningCLI lists) still holds every HubSource option it does not fix, with the task's defaults."""
    import inspect

    from jsonargparse import ArgumentParser

    import lit_grpo
    from lit_grpo.data import HubSource

    cls = getattr(lit_grpo, name)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "task")
    defaults = vars(parser.get_defaults().task)
    hub = set(inspect.signature(HubSource).parameters)
    own = set(inspect.signature(cls).parameters) - {"kwargs"}
    assert set(defaults) == (hub - FIXED[name]) | own
    for option, param in inspect.signature(cls).parameters.items():
        if option != "kwargs" and param.default is not inspect.Parameter.empty:  # path may be required
            assert defaults[option] == param.default, option
