"""Gradient fidelity on the tiny policy: the ``lit-grpo fidelity`` subcommand and the GradientFidelity callback."""

import csv
import math
from pathlib import Path

import pytest
import torch

from lit_grpo import GRPO, MaxRL, ReinforcePlusPlus, Sign
from lit_grpo.callbacks import GradientFidelity, GradientProbe
from lit_grpo.commands import main as cli_main
from lit_grpo.commands.fidelity import fidelity as fidelity_main
from lit_grpo.lab.registry import MetricPattern
from tests.callbacks.events import read_events

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ["--params", r"layers\.2\.mlp\.down_proj"]
Z = 4.5  # standard errors


def _read(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the configs name assets/ relative to the repository


def test_subcommand_writes_tables_whose_omegas_match_the_pool_expectation(at_root, tmp_path):
    out = tmp_path / "fid"
    args = [
        "--config",
        "configs/quickstart.yaml",
        "--out",
        str(out),
        "--num-prompts",
        "2",
        "--subsamples",
        "400",
    ]
    args += ["--estimators", "GRPO", "RLOO", "Sign", "MaxRL", *PARAMS]
    assert cli_main(["fidelity", *args]) == 0  # dispatched by the lit-grpo entry point
    prompts, bins = _read(out / "prompts.csv"), _read(out / "bins.csv")
    assert len(prompts) == 2 * 4 and {r["estimator"] for r in prompts} == {"GRPO", "RLOO", "Sign", "MaxRL"}
    assert all(int(r["correct"]) == round(float(r["pass_rate"]) * 256) for r in prompts)
    checked = 0
    for r in prompts:
        omega, se, exact = float(r["omega"]), float(r["omega_se"]), float(r["omega_pool"])
        if math.isfinite(exact):  # the identity holds for the real policy's rows, up to Monte-Carlo error
            assert abs(omega - exact) <= Z * se, r
            checked += 1
    assert checked >= 4  # prompts with 0 < c < 256
    assert {"estimator", "objective", "bin", "prompts", "cos", "norm_ratio", "variance", "snr"} == set(
        bins[0]
    )
    every = [r for r in bins if r["bin"] == "all"]
    assert len(every) == 4 * 4 and all(int(r["prompts"]) == 2 for r in every)
    assert (out / "omega.png").stat().st_size > 0


def test_a_model_directory_or_a_checkpoint_can_be_measured(at_root, tmp_path, sft_model_path):
    from tests.helpers import tiny_module

    module = tiny_module(sft_model_path)
    module.configure_model()
    with torch.no_grad():
        for p in module.policy.parameters():
            p.mul_(0.0)  # a policy that samples uniformly: almost never correct
    torch.save({"state_dict": module.state_dict()}, tmp_path / "zero.ckpt")
    common = ["--config", "configs/quickstart.yaml", "--num-prompts", "1", "--subsamples", "50", *PARAMS]
    assert fidelity_main([*common, "--out", str(tmp_path / "m"), "--model", sft_model_path]) == 0
    assert fidelity_main([*common, "--out", str(tmp_path / "c"), "--ckpt", str(tmp_path / "zero.ckpt")]) == 0
    sft, zero = _read(tmp_path / "m" / "prompts.csv"), _read(tmp_path / "c" / "prompts.csv")
    assert float(sft[0]["pass_rate"]) > 0.05 and float(zero[0]["pass_rate"]) < 0.05
    torch.save({"state_dict": {}}, tmp_path / "empty.ckpt")
    with pytest.raises(SystemExit, match="lacks .* policy weights"):
        fidelity_main([*common, "--out", str(tmp_path / "e"), "--ckpt", str(tmp_path / "empty.ckpt")])


def test_the_policy_is_measured_in_float32_unless_asked_otherwise(at_root, tmp_path):
    # a config's own dtype (the real quickstart's auto: bfloat16 on a CPU with native bf16 matmul) would move the
    # measurement with the machine; --dtype sets it
    import yaml

    from lit_grpo.cli import LitGRPOCLI
    from lit_grpo.commands.fidelity import build_parser
    from lit_grpo.commands.fidelity_measure import load

    spec = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    spec["model"]["init_args"]["dtype"] = "bfloat16"
    config = tmp_path / "bf16.yaml"
    config.write_text(yaml.safe_dump(spec))
    for given, dtype in (([], torch.float32), (["--dtype", "bfloat16"], torch.bfloat16)):
        args = build_parser().parse_args(["--config", str(config), "--out", str(tmp_path), *given])
        module, _ = load(args, LitGRPOCLI)
        assert next(module.policy.parameters()).dtype == dtype, given


def test_bad_arguments_are_refused_with_the_fix(at_root, tmp_path):
    common = ["--config", "configs/quickstart.yaml", "--out", str(tmp_path), *PARAMS]
    with pytest.raises(SystemExit, match="below 256"):
        fidelity_main([*common, "--ref-group-size", "64"])
    with pytest.raises(SystemExit, match="ReinforcePlusPlus cannot be measured"):
        fidelity_main([*common, "--estimators", "ReinforcePlusPlus"])
    with pytest.raises(SystemExit, match="unknown AdvantageEstimator 'NoSuch'; choose one of"):
        fidelity_main([*common, "--estimators", "NoSuch"])


def test_the_callback_logs_fidelity_during_training(fit_run):
    cb = GradientFidelity(
        [GRPO(), Sign(), MaxRL()],
        every_n_steps=2,
        num_prompts=1,
        subsamples=100,
        probe=GradientProbe(params=[r"layers\.2\.mlp\.down_proj"], micro_batch_size=128),
    )
    run = fit_run([cb], max_steps=3)
    events = read_events(run.log_dir)
    assert [e.step for e in events.Scalars("fidelity/pass_rate_mean")] == [0, 2]
    assert [e.step for e in events.Images("fidelity/omega")] == [0, 2]
    logged = {(t, e.step): e.value for t in events.Tags()["scalars"] for e in events.Scalars(t)}
    declared = [MetricPattern(m, "GradientFidelity") for m in GradientFidelity.metrics]
    written = {t for t, _ in logged if t.startswith("fidelity/")}
    assert {t for t in written if not any(p.matches(t) for p in declared)} == set()  # all declared
    for step in (0, 2):
        assert len(_read(Path(run.log_dir) / "fidelity" / f"step_{step}" / "prompts.csv")) == 3
        bins = _read(Path(run.log_dir) / "fidelity" / f"step_{step}" / "bins.csv")
        assert {r["estimator"] for r in bins} == {"GRPO", "Sign", "MaxRL"}
        for r in bins:  # the scalars are the CSV's numbers; NaN (no reference direction) is left out
            if r["bin"] == "all" and r["objective"] == "reward":
                for tag, value in [
                    (f"fidelity/{r['estimator']}/snr", r["snr"]),
                    (f"fidelity/{r['estimator']}/cos_reward", r["cos"]),
                ]:
                    if math.isfinite(float(value)):
                        assert logged[tag, step] == pytest.approx(float(value), rel=1e-4)
                    else:
                        assert (tag, step) not in logged


@pytest.mark.slow
def test_the_callback_does_not_change_training(fit_run):
    base = fit_run([], max_steps=2, name="base")
    measured = fit_run(
        [
            GradientFidelity(
                every_n_steps=2, num_prompts=1, subsamples=20,
                probe=GradientProbe(params=[r"layers\.2\.mlp\.down_proj"], micro_batch_size=128),
            )
        ],
        max_steps=2,
        name="measured",
    )
    for a, b in zip(base.module.policy.parameters(), measured.module.policy.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_callback_refuses_what_it_cannot_measure(fit_run):
    with pytest.raises(ValueError, match="ref_group_size=64 must be >= 256"):
        GradientFidelity(ref_group_size=64)
    with pytest.raises(ValueError, match="no per-prompt estimate"):
        fit_run([GradientFidelity([ReinforcePlusPlus()])], max_steps=1)
