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
