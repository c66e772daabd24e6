"""The HF engine's defaults are its fastest exact settings, and every published experiment pins the draws it ran
with (``generate``'s tokens from the same seed: ``shrink: false``, ``sampler: multinomial``), so that its runs
reproduce; so does every benchmark script whose numbers are published, unless it measures settings it names or
publishes no figures. tests/commands/test_cli.py checks the shipped configs' engines."""

import re
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
#: Every script that samples with lit-grpo's HF engine (or runs ``lit-grpo fit``), and how a rerun draws:
#: ``pinned``: GENERATE_DRAWS, as its published numbers were drawn (before the engine's fast defaults);
#: the other entries say why the script sets no pin itself.
SCRIPTS = {
    "bench/async_rollouts.py": "pinned",
    "bench/crn_agreement.py": "pinned",
    "bench/quickstart_runs.py": "the README's quickstart at its defaults, recorded and held to today's (tests/bench)",
    "bench/real_engines.py": "pinned",
    "bench/real_tasks.py": "pinned",
    "bench/reasoning_gym_start.py": "pinned",
    "bench/shared_prefill.py": "pinned",
    "bench/soak.py": "pinned",
    "bench/grpo_step/workloads.py": "pinned",  # zero (TRL's samples), and the held-out yardstick
    "scripts/residue_start.py": "pinned",
    "bench/grpo_step/lit_worker.py": "per workload: workloads.engine_options (tests/bench)",
    "bench/logprob_memory.py": "per arm: PER_STEP, the generate path its published figures measured",
    "bench/hf_decode.py": "names every setting it measures (SETTINGS)",
    "bench/callback_overhead.py": "publishes no figures (docs/diagnostics.md): the defaults",
    "bench/rollout_throughput.py": "publishes no figures (docs/vllm.md): the defaults",
    "scripts/gpu_check.py": "pass/fail checks of the shipped configs",
    "scripts/probe_policy.py": "the fit arguments' engine: its quoted commands pin (checked below)",
    "bench/real_quickstart_time.py": "the real quickstart as users run it: the defaults, its figures rerun at them",
    "bench/agent_budget.py": "pinned",  # EPISODE_DRAWS_ARG in every stage (tests/bench)
    "bench/agent_step.py": "names every setting it measures (ARMS)",
    "bench/provenance.py": "samples nothing: resolves the settings a command runs with",
}


#: Published experiments that ran after the fast defaults landed and draw with them, as their users do; the
#: defaults they drew with are held by test_the_defaults_are_the_fast_exact_settings
AT_DEFAULTS = {"search_agent_pilot", "search_agent_estimators"}


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
def test_every_published_experiment_pins_its_draws(path, monkeypatch):
    spec = yaml.safe_load(path.read_text())
    if not _published(spec):
        pytest.skip(f"{path.name} has no published runs")
    monkeypatch.chdir(ROOT)
    if spec["name"] in AT_DEFAULTS:
        args = [a for base in spec.get("base", []) for a in ("--config", base)] + spec.get("args", [])
        assert _draws(args) == ("own", True, "inverse_cdf"), f"{path.name} ran at the engine's defaults"
    else:
        pinned_base = any(PIN_YAML in (ROOT / base).read_text() for base in spec.get("base", []))
        assert PIN in spec.get("args", []) or pinned_base, f"{path.name}: add {PIN!r} to its args"
    for name, step in spec.get("prepare", {}).items():  # a prepare step that samples is part of the published run
        configs = [c for prev, c in zip(step["command"], step["command"][1:], strict=False) if prev == "--config"]
        if spec["name"] in AT_DEFAULTS:
            args = [a for c in configs for a in ("--config", c)]
            assert _draws(args) == ("own", True, "inverse_cdf"), f"{path.name}: prepare step {name}"
        else:
            assert any(PIN_YAML in (ROOT / c).read_text() for c in configs), f"{path.name}: prepare step {name}"


def _samplers() -> list[Path]:
    """The scripts of bench/ and scripts/ that build an HF engine or a ``lit-grpo fit`` run."""
    marks = re.compile(r'HFGenerateEngine\(|"lit_grpo", "fit"|LitGRPOCLI\(')
    paths = [*(ROOT / "bench").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]
    return sorted(p for p in paths if marks.search(p.read_text()))


def test_every_sampling_script_says_how_a_rerun_draws():
    listed = {str(p.relative_to(ROOT)) for p in _samplers()}
    assert listed <= set(SCRIPTS), f"add to SCRIPTS (pin GENERATE_DRAWS if its numbers are published): " \
        f"{sorted(listed - set(SCRIPTS))}"
    for name, how in SCRIPTS.items():
        if how == "pinned":
            assert re.search("GENERATE_DRAWS|EPISODE_DRAWS", (ROOT / name).read_text()), f"{name}: pin the draws"


def _draws(args: list[str]) -> tuple:
    """(decoder, shrink, sampler) of the HF engine that ``lit-grpo fit`` arguments build (in any wrapper)."""
    engine = LitGRPOCLI(args=args, run=False).model.engine
    while not isinstance(engine, HFGenerateEngine) and hasattr(engine, "engine"):
        engine = engine.engine
    return engine.decoder, engine.shrink, engine.sampler


def test_the_async_and_soak_benchmarks_run_with_generates_draws(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import async_rollouts
    import soak

    for arm in async_rollouts.ARMS:  # every arm of every part (the pin does not depend on the config)
        assert _draws(async_rollouts.fit_args(arm, 1, 0, tmp_path, [])) == ("own", False, "multinomial"), arm
    assert _draws(soak.fit_args(1, 1, tmp_path, tmp_path / "samples.jsonl")) == ("own", False, "multinomial")


@pytest.mark.parametrize("path", [*EXPERIMENTS, *sorted((ROOT / "experiments" / "prepare").glob("*.yaml"))],
                         ids=lambda p: p.stem)
def test_every_quoted_probe_command_pins_its_draws(path):
    """A probe_policy command quoted with numbers in an experiment's header draws as they were drawn."""
    lines = [line.removeprefix("#").strip() for line in path.read_text().splitlines() if line.startswith("#")]
    commands, current = [], None
    for line in lines:
        if current is None and line.startswith("python scripts/probe_policy.py"):
            current = line
        elif current is not None:
            current += " " + line
        if current is not None and not current.endswith("\\"):
            commands.append(current)
            current = None
    for command in commands:
        assert f"'{PIN}'" in command, f"{path.name}: add '{PIN}' to {command[:60]}..."
