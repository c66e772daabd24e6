"""The HF engine's defaults are its fastest exact settings, and every published experiment pins the draws it ran
with (``generate``'s tokens from the same seed: ``shrink: false``, ``sampler: multinomial``), so that its runs
reproduce. tests/commands/test_cli.py checks the shipped configs' engines."""

from pathlib import Path

import pytest
import yaml

from lit_grpo.cli import LitGRPOCLI
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.rollout.hf import GENERATE_DRAWS, GENERATE_DRAWS_ARG

ROOT = Path(__file__).resolve().parents[2]
#: The one argument by which an experiment pins generate's draws, as its YAML spells it
PIN = ('--model.engine={"class_path": "lit_grpo.HFGenerateEngine", "init_args": {"shrink": false, '
       '"sampler": "multinomial"}}')
#: The same pin in a config file's engine block
PIN_YAML = "engine: {class_path: lit_grpo.HFGenerateEngine, init_args: {shrink: false, sampler: multinomial}}"
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.yaml"))


def _published(spec: dict) -> bool:
    return (ROOT / "docs" / "results" / spec["name"] / "runs.csv").is_file()


def test_the_defaults_are_the_fast_exact_settings():
    engine = HFGenerateEngine()
    assert (engine.decoder, engine.shrink, engine.sampler) == ("own", True, "inverse_cdf")
    assert (engine.use_cache, engine.merge_lora, engine.shared_prefill) == (True, True, True)


def test_the_pin_builds_an_engine_that_draws_generates_tokens(monkeypatch):
    assert PIN == GENERATE_DRAWS_ARG and GENERATE_DRAWS == {"shrink": False, "sampler": "multinomial"}
    monkeypatch.chdir(ROOT)
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", PIN], run=False)
    assert (cli.model.engine.decoder, cli.model.engine.shrink, cli.model.engine.sampler) == \
        ("own", False, "multinomial")


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_published_experiment_pins_its_draws(path):
    spec = yaml.safe_load(path.read_text())
    if not _published(spec):
        pytest.skip(f"{path.name} has no published runs")
    pinned_base = any(PIN_YAML in (ROOT / base).read_text() for base in spec.get("base", []))
    assert PIN in spec.get("args", []) or pinned_base, f"{path.name}: add {PIN!r} to its args"
    for name, step in spec.get("prepare", {}).items():  # a prepare step that samples is part of the published run
        configs = [c for prev, c in zip(step["command"], step["command"][1:], strict=False) if prev == "--config"]
        assert any(PIN_YAML in (ROOT / c).read_text() for c in configs), f"{path.name}: prepare step {name}"
