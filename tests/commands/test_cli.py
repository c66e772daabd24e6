import glob
import re
from pathlib import Path

import pytest
import torch
import yaml

import lit_grpo
from lit_grpo import extras
from lit_grpo.cli import LitGRPOCLI
from lit_grpo.commands import COMMANDS, main
from lit_grpo.estimators import REGISTRY
from lit_grpo.lab.loader import needed_extras
from lit_grpo.rollout import HFGenerateEngine

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml"))
ESTIMATORS = list(REGISTRY)  # every estimator the package registers


def _needs(config: str) -> str | None:
    """What the config, or a config its first line applies it over, needs that this machine may lack."""
    text = (ROOT / config).read_text()
    first = text.splitlines()[0].split() if text else []
    files = [str(ROOT / config)] + [str(ROOT / c) for prev, c in zip(first, first[1:], strict=False)
                                    if prev == "--config" and c != config and (ROOT / c).is_file()]
    text += "".join(Path(f).read_text() for f in files[1:])
    for extra in extras.missing(needed_extras(tuple(files), ())):
        return f"the {extra} extra, which is not installed ({extras.install_hint(extra)})"
    if re.search(r"^\s*accelerator:\s*(gpu|cuda)\b", text, re.M) and not torch.cuda.is_available():
        return "a CUDA GPU, which this machine lacks (tests/scale instantiates it with accelerator=cpu)"
    return None


@pytest.fixture(autouse=True)
def _run_from_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _reward_model(request, tmp_path) -> list[str]:
    """A tiny sequence-classification reward model saved to disk, for the config whose first line asks for one."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    tiny = request.getfixturevalue("tiny_model_path")
    config = AutoConfig.from_pretrained(tiny)
    config.num_labels = 1
    AutoModelForSequenceClassification.from_config(config).save_pretrained(tmp_path / "rm")
    AutoTokenizer.from_pretrained(tiny).save_pretrained(tmp_path / "rm")
    return [f"--model.reward.init_args.path={tmp_path / 'rm'}"]


#: Configs whose first line gives a folder of the user's own (``<folder>``): what the test makes for it
USER_FILES = {"configs/rewards/reward_model.yaml": _reward_model}


@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_parses_and_instantiates(config, request, tmp_path):
    missing = _needs(config)
    if missing:
        pytest.skip(f"{config} needs {missing}")
    first = (ROOT / config).read_text().splitlines()[0]
    assert first.startswith("# "), f"{config} must start with a comment giving the command and hardware"
    # overlays (configs/estimators/) apply on top of the config their first line names
    first_command = first.split()
    configs = [a for prev, a in zip(first_command, first_command[1:], strict=False) if prev == "--config"]
    args = [x for c in (configs or [config]) for x in ("--config", c)]
    assert config in configs or not configs, f"{config}: its first line must show the command that uses it"
    assert ("<folder>" in first) == (config in USER_FILES), f"{config}: add what it needs to USER_FILES"
    args += USER_FILES[config](request, tmp_path) if config in USER_FILES else []
    cli = LitGRPOCLI(args=args, run=False)
    assert cli.model is not None and cli.datamodule is not None and cli.trainer is not None
    engine = cli.model.engine
    while not isinstance(engine, HFGenerateEngine) and hasattr(engine, "engine"):  # an episode or async engine
        engine = engine.engine
    if isinstance(engine, HFGenerateEngine):  # every config samples with the fast exact defaults; the commands
        # that reproduce a published run pin its draws (tests/rollout/test_hf_defaults.py)
        assert (engine.decoder, engine.shrink, engine.sampler) == ("own", True, "inverse_cdf"), config
        assert engine.episode_cache_mib > 0, config


def test_print_config_resolves_components(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "configs/quickstart.yaml", "--model.estimator=Sign", "--print_config"])
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["init_args"]["estimator"]["class_path"] in ("lit_grpo.Sign", "lit_grpo.estimators.sign.Sign")


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_short_estimator_names_resolve(estimator):
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", f"--model.estimator={estimator}"], run=False)
    assert type(cli.model.estimator).__name__ == estimator


def test_estimator_options_on_the_command_line():
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.estimator=SoftmaxGRPO",
                           "--model.estimator.tau=0.3"], run=False)
    assert cli.model.estimator.tau == 0.3


def test_unknown_estimator_fails_at_parse_time(capsys):
    with pytest.raises(SystemExit):
        LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.estimator=Bogus"], run=False)
    err = capsys.readouterr().err
    assert "Bogus" in err and "estimator" in err


def test_unknown_option_fails_at_parse_time(capsys):
    with pytest.raises(SystemExit):
        LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.algorithm.aggregation=mean"], run=False)
    err = capsys.readouterr().err
    assert "token-mean" in err  # the valid choices are listed


def test_bad_value_is_reported_with_the_option(capsys):
    with pytest.raises((SystemExit, ValueError), match="tau|") as info:
        LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.estimator=SoftmaxGRPO",
                         "--model.estimator.tau=-1"], run=False)
    message = str(info.value) + capsys.readouterr().err
    assert "tau" in message


@pytest.mark.parametrize(("component", "option"), [("loss", "dual_clip=3"), ("estimator", "tau=0.5")])
def test_an_option_of_a_component_the_config_leaves_out_says_to_name_its_class(tmp_path, capsys, component, option):
    config = tmp_path / "without.yaml"
    config.write_text(f"model:\n  init_args:\n    {component}: null\n")  # the module builds its default in code
    with pytest.raises(SystemExit) as done:
        LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--config", str(config), f"--model.{component}.{option}"],
                   run=False)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    name = option.split("=")[0]
    assert done.value.code == 2 and last.startswith(f"error: --model.{component}.{name}: the config names no class for")
    assert f"--model.{component}=CLASS --model.{component}.{option}" in last


def test_an_option_a_component_does_not_take_is_named_on_the_last_line(capsys):
    with pytest.raises(SystemExit) as done:
        LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.loss.bogus=3"], run=False)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.value.code == 2
    assert last.startswith("error: --model.loss.bogus: PPOClip takes no option 'bogus'; its options are eps_low, ")


@pytest.mark.parametrize(
    ("option", "last_line"),
    [
        ("--model.group_size=abc", "--model.group_size: GRPOModule's group_size takes a whole number, not 'abc'"),
        ("--model.sampling.max_new_tokens=x",
         "--model.sampling.max_new_tokens: Sampling's max_new_tokens takes a whole number, not 'x'"),
        ("--model.bogus=1", "--model.bogus: GRPOModule takes no option 'bogus'; its options are model, reward, "),
        ("--data.prompts_per_step=x", "--data.prompts_per_step: PromptDataModule's prompts_per_step takes a whole "
         "number, not 'x'"),
        ("--model.algorithm.aggregation=mean", "--model.algorithm.aggregation: 'mean' is not a choice of Algorithm's "
         "aggregation; choose one of token-mean, seq-mean-token-mean, "),
        # a class named on the command line: its options are checked
        ("--model.loss.correction=MaskedIS --model.loss.correction.bogus=1",
         "--model.loss.correction.bogus: MaskedIS takes no option 'bogus'; its options are level, "),
    ],
)
def test_a_bad_value_is_named_on_the_last_line(capsys, option, last_line):
    with pytest.raises(SystemExit) as done:
        LitGRPOCLI(args=["--config", "configs/quickstart.yaml", *option.split()], run=False)
    assert done.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: {last_line}")


def test_a_bad_value_in_a_config_file_is_named_on_the_last_line(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("model:\n  init_args:\n    group_size: abc\n")
    with pytest.raises(SystemExit) as done:
        LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--config", str(config)], run=False)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.value.code == 2
    assert last == f"error: model.init_args.group_size in {config}: GRPOModule's group_size takes a whole number, not 'abc'"


def test_an_unknown_option_in_a_config_file_is_named_with_its_file(tmp_path, capsys):
    config = tmp_path / "typo.yaml"
    config.write_text("model:\n  init_args:\n    sampling:\n      max_new_token: 8\n")
    with pytest.raises(SystemExit) as done:
        LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--config", str(config)], run=False)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.value.code == 2
    assert last.startswith(f"error: model.init_args.sampling.max_new_token in {config}: Sampling takes no option "
                           "'max_new_token'; its options are ") and "max_new_tokens" in last


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        ("--model.optim.lr=-1", "optim.lr=-1.0 must be > 0"),  # a component's check, inside jsonargparse's dump
        ("--data.source.init_args.max_operand=-3", "max_operand=-3"),
        ("--model.model=/nonexistent/model", "/nonexistent/model"),
    ],
)
def test_a_failing_command_names_the_problem_on_its_last_line(capsys, option, problem):
    assert main(["fit", "--config", "configs/quickstart.yaml", option, "--trainer.max_steps=1"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("lit-grpo fit: error: ") and problem in last and len(last) < 400, last


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_quickstart_runs_a_few_steps_with_each_estimator(tmp_path, estimator, capsys):
    main(["fit", "--config", "configs/quickstart.yaml", f"--model.estimator={estimator}",
          "--trainer.max_steps=2", "--trainer.val_check_interval=2", "--data.max_val_prompts=8",
          "--trainer.enable_progress_bar=false", f"--trainer.logger.init_args.save_dir={tmp_path}"])
    out = capsys.readouterr()
    assert "Held-out prompts" in out.out + out.err
    run_dirs = glob.glob(f"{tmp_path}/quickstart/version_*")
    assert run_dirs and glob.glob(f"{run_dirs[0]}/events*")
    saved = yaml.safe_load(Path(run_dirs[0], "config.yaml").read_text())  # the resolved config
    assert saved["model"]["init_args"]["estimator"]["class_path"].endswith(estimator)


@pytest.mark.parametrize(("option", "name"), [("--model.loss=PPOClip", "PPOClip"),
                                             ("--model.reward=ChoiceLetter", "ChoiceLetter")])
def test_short_component_names_resolve(option, name):
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", option], run=False)
    component = cli.model.loss if option.startswith("--model.loss") else cli.model.reward
    assert type(component).__name__ == name


def test_loss_options_on_the_command_line():
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.loss.eps_high=0.28",
                           "--model.loss.correction=TruncatedIS", "--model.loss.correction.level=token"], run=False)
    assert type(cli.model.loss).__name__ == "PPOClip"
    assert (cli.model.loss.eps_high, cli.model.loss.correction.level) == (0.28, "token")


#: 2 tiny steps of each loss, and of the update's options together, from the command line: the option, and the
#: scalars the run must have written.
UPDATE_RUNS = {
    "GSPO": (["--model.loss=GSPO", "--model.algorithm.steps_per_generation=2"], {"train/seq_ratio", "optim/clip_frac"}),
    "CISPO": (["--model.loss=CISPO", "--model.algorithm.steps_per_generation=2"], {"train/clip_frac", "optim/ratio_max"}),
    "SAPO": (["--model.loss=SAPO", "--model.algorithm.steps_per_generation=2"], {"train/gate", "train/policy_kl"}),
    "GMPO": (["--model.loss=GMPO", "--model.algorithm.steps_per_generation=2"], {"train/seq_ratio", "train/ratio_min"}),
    "options": ([
        "--model.loss.correction=MaskedIS", "--model.loss.correction.level=geometric",
        "--model.shaping=OverlongPenalty", "--model.shaping.buffer=2", "--model.algorithm.drop_truncated=true",
        "--model.algorithm.entropy_coef=0.001", "--model.curriculum=PromptCurriculum", "--model.curriculum.min_visits=1",
    ], {"train/is_masked_frac", "reward/overlong_penalty", "rollout/retired_prompts", "rollout/skipped_prompts"}),
}


@pytest.mark.parametrize("run", list(UPDATE_RUNS))
def test_losses_and_update_options_run_a_few_steps(tmp_path, run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args, expected = UPDATE_RUNS[run]
    main(["fit", "--config", "configs/quickstart.yaml", *args, "--trainer.max_steps=2", "--data.prompts_per_step=4",
          "--model.group_size=4", "--data.max_val_prompts=4", "--trainer.val_check_interval=2",
          "--trainer.enable_progress_bar=false", f"--trainer.logger.init_args.save_dir={tmp_path}"])
    (run_dir,) = glob.glob(f"{tmp_path}/quickstart/version_*")
    events = EventAccumulator(glob.glob(f"{run_dir}/events*")[0])
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert expected <= tags, expected - tags
    saved = yaml.safe_load(Path(run_dir, "config.yaml").read_text())["model"]["init_args"]
    assert saved["loss"]["class_path"].endswith(run if run != "options" else "PPOClip")


def test_a_builtin_config_runs_by_name_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no configs/ or assets/ here
    main(["fit", "--config", "quickstart", "--trainer.max_steps=1", "--trainer.val_check_interval=1",
          "--data.max_val_prompts=8", "--trainer.enable_progress_bar=false"])
    out = capsys.readouterr()
    assert "Held-out prompts" in out.out + out.err
    saved = tmp_path / "runs" / "quickstart" / "version_0" / "config.yaml"  # runs/ in the working directory
    text = saved.read_text()
    assert text.startswith(f"# lit-grpo {lit_grpo.__version__} (python ")  # the version that wrote the run
    assert yaml.safe_load(text)["model"]["init_args"]["model"] == "tiny-arith-sft"  # still usable as --config
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:  # the saved config runs again as it is
        main(["fit", "--config", str(saved), "--print_config"])
    assert done.value.code == 0 and "model: tiny-arith-sft" in capsys.readouterr().out


def test_an_unknown_config_name_exits_2_naming_close_names(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", "estimators/sing"])
    assert done.value.code == 2
    assert "Did you mean estimators/sign" in capsys.readouterr().err


def test_help_names_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: lit-grpo ")
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert listed == [*COMMANDS, "--version"]
    assert set(COMMANDS) == {"fit", "validate", "test", "compare", "fidelity", "curves", "configs", "models"}
    assert all(c in " ".join(out.split()) for c in ("lit-grpo configs list", "lit-grpo compare", "--config quickstart"))


def test_an_unknown_command_exits_2_listing_the_commands(capsys):
    assert main(["trian", "--config", "quickstart"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'trian'" in err
    assert "choose one of fit, validate, test, compare, fidelity, curves, configs, models" in err


def test_the_console_command_runs_a_command_of_the_table(tmp_path):
    """``python -m lit_grpo`` (the ``lit-grpo`` console script's entry point) dispatches ``curves`` and exits with
    its status."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "lit_grpo", "curves", "--estimators", "Sign", "OPO", "-G", "4",
                           "--out", str(tmp_path / "c.png")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("| ")}
    assert rows["Sign"].count(" 2.0000 ") == 7 and "OPO" in rows
    assert (tmp_path / "c.png").stat().st_size > 1000
    failed = subprocess.run([sys.executable, "-m", "lit_grpo", "curves", "--estimators", "Nope"],
                            capture_output=True, text=True, timeout=300)
    assert failed.returncode == 1 and "unknown AdvantageEstimator 'Nope'; choose one of" in failed.stderr


def test_a_run_under_a_process_group_destroys_it_before_returning(tmp_path):
    """Gloo's threads left to the interpreter's exit can abort a successful run (SIGABRT) under torchrun."""
    code = main(["fit", "--config", "configs/quickstart.yaml", "--trainer.strategy=ddp", "--trainer.devices=1",
                 "--trainer.max_steps=1", "--trainer.limit_val_batches=0", "--trainer.enable_progress_bar=false",
                 f"--trainer.logger.init_args.save_dir={tmp_path}"])
    assert code == 0
    assert list(tmp_path.glob("quickstart/version_*/events*"))  # the run trained (under the process group)
    assert not torch.distributed.is_initialized()
