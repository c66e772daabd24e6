"""``dtype: auto`` (lit_grpo.precision): bfloat16 where the CPU flags name native bf16 matmul, float32 elsewhere.
The flags are faked (a cpuinfo file written here), so each branch runs on any machine."""

from pathlib import Path

import pytest

from lit_grpo import precision
from lit_grpo.cli import LitGRPOCLI
from lit_grpo.precision import cpu_flags, resolve_dtype

ROOT = Path(__file__).resolve().parents[1]
AVX2_ONLY = "fpu sse sse2 avx avx2 fma"


def _cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    return path


@pytest.mark.parametrize(("flags", "dtype"), [
    (AVX2_ONLY + " avx512f avx512_bf16", "bfloat16"),
    (AVX2_ONLY + " amx_tile amx_bf16", "bfloat16"),
    (AVX2_ONLY + " avx512f avx512bw", "float32"),  # AVX-512 without its bf16 extension: emulated
    (AVX2_ONLY, "float32"),
])
def test_auto_follows_the_cpu_flags(tmp_path, flags, dtype):
    path = _cpuinfo(tmp_path, flags)
    assert cpu_flags(path) == frozenset(flags.split())
    choice = resolve_dtype("auto", cpuinfo=path)
    assert choice.dtype == dtype
    assert choice.line().startswith(f"dtype=auto: {dtype} (")


def test_auto_without_cpu_flags_is_float32(tmp_path):
    assert resolve_dtype("auto", cpuinfo=tmp_path / "missing").dtype == "float32"
    (tmp_path / "empty").write_text("processor\t: 0\n")
    assert resolve_dtype("auto", cpuinfo=tmp_path / "empty").dtype == "float32"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_given_dtype_is_kept(tmp_path, dtype):
    assert resolve_dtype(dtype, flags=frozenset(AVX2_ONLY.split())).dtype == dtype
    assert resolve_dtype(dtype, flags=frozenset(["avx512_bf16"])).dtype == dtype


def test_auto_off_the_cpu_is_float32():  # a GPU: trainer.precision picks Lightning's mixed precision
    assert resolve_dtype("auto", flags=frozenset(["avx512_bf16"]), on_cpu=False).dtype == "float32"


def test_auto_without_lora_is_float32():  # the trained weights themselves would be bfloat16
    assert resolve_dtype("auto", flags=frozenset(["avx512_bf16"]), lora=False).dtype == "float32"


@pytest.mark.parametrize(("flags", "dtype"), [(AVX2_ONLY + " avx512_bf16", "bfloat16"), (AVX2_ONLY, "float32")])
def test_the_cli_resolves_auto_prints_it_and_saves_it(tmp_path, monkeypatch, capsys, flags, dtype):
    monkeypatch.setattr(precision, "CPUINFO", _cpuinfo(tmp_path, flags))
    monkeypatch.chdir(ROOT)
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.dtype=auto", "--trainer.accelerator=cpu",
                           "--model.lora={r: 4}"], run=False)
    assert cli.model.dtype_name == dtype  # what the policy loads in and its checkpoints record
    assert cli.config["model"]["init_args"]["dtype"] == dtype  # what config.yaml saves
    assert f"model.dtype=auto: {dtype} (" in capsys.readouterr().out


def test_the_cli_keeps_float32_without_lora(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(precision, "CPUINFO", _cpuinfo(tmp_path, AVX2_ONLY + " avx512_bf16"))
    monkeypatch.chdir(ROOT)
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml", "--model.dtype=auto", "--trainer.accelerator=cpu"],
                     run=False)
    assert cli.model.dtype_name == "float32"
    assert "model.dtype=auto: float32 (no LoRA" in capsys.readouterr().out


def _auto_experiments() -> list[Path]:
    """The experiments with a base config that sets dtype auto."""
    import yaml

    specs = {p: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "experiments").glob("*.yaml"))}
    return [p for p, spec in specs.items()
            if any("dtype: auto" in (ROOT / base).read_text() for base in spec.get("base", []))]


AUTO_EXPERIMENTS = _auto_experiments()


def test_the_real_model_experiments_are_among_those_checked():
    assert {"real_sign_vs_drgrpo", "real_sign_vs_drgrpo_lr"} <= {p.stem for p in AUTO_EXPERIMENTS}


@pytest.mark.parametrize("path", AUTO_EXPERIMENTS, ids=lambda p: p.stem)
def test_an_experiment_on_an_auto_dtype_config_states_its_dtype(path):
    # dtype auto picks by the CPU: an experiment on such a config would train in bfloat16 on one machine and float32
    # on another, and no longer in the dtype its published or registered design ran in
    import yaml

    given = [a for a in yaml.safe_load(path.read_text()).get("args", []) if a.startswith("--model.dtype=")]
    assert given and given[-1] != "--model.dtype=auto", f"{path.name}: add --model.dtype=float32 (or bfloat16)"


def test_the_async_benchmarks_real_workload_keeps_its_published_dtype(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import async_rollouts

    config, _, extra = async_rollouts.workload(real=True)
    assert "dtype: auto" in (ROOT / config).read_text()  # what the pin is for
    args = async_rollouts.fit_args("sync", 2, 0, tmp_path, extra, config)
    assert [a for a in args if a.startswith("--model.dtype=")] == ["--model.dtype=float32"]
    assert not [a for a in async_rollouts.workload(real=False)[2] if a.startswith("--model.dtype")]
