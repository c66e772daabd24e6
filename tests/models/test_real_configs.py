"""The real-model configs build offline (no model is loaded until fit), the GPU one with accelerator=cpu."""

from pathlib import Path

import pytest

from lit_grpo.cli import LitGRPOCLI
from lit_grpo.models.sources import PACKAGED

ROOT = Path(__file__).resolve().parents[2]
CPU = str(ROOT / "configs" / "real" / "quickstart.yaml")
GPU = str(ROOT / "configs" / "real" / "quickstart_gpu.yaml")


@pytest.fixture(autouse=True)
def _no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LIT_GRPO_CACHE", str(tmp_path / "cache"))  # building a config must not fetch


def test_cpu_quickstart_names_the_packaged_model_and_holds_out_500_prompts(tmp_path):
    cli = LitGRPOCLI(args=["--config", CPU], run=False)
    assert cli.model.model_name in PACKAGED and cli.model.lora is not None
    assert cli.datamodule.source.num_val >= 500 and cli.trainer.max_steps > 0
    assert not (tmp_path / "cache").exists()


def test_gpu_variant_overlays_the_quickstart_with_bf16_mixed_precision(tmp_path):
    first = Path(GPU).read_text().splitlines()[0]
    assert first == "# lit-grpo fit --config configs/real/quickstart.yaml --config configs/real/quickstart_gpu.yaml"
    cli = LitGRPOCLI(args=["--config", CPU, "--config", GPU, "--trainer.accelerator=cpu"], run=False)
    assert cli.trainer.precision == "bf16-mixed" and cli.trainer.max_steps == 200
    assert cli.model.model_name in PACKAGED and cli.datamodule.val_batch_size == 500
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("task", ["calculator", "search_agent"])
def test_tool_tasks_train_the_policy_their_supervised_start_writes(task):
    if task == "search_agent":
        pytest.importorskip("bm25s")
    sft = LitGRPOCLI(args=["--config", str(ROOT / "configs" / "real" / f"{task}_sft.yaml")], run=False)
    rl = LitGRPOCLI(args=["--config", str(ROOT / "configs" / "real" / f"{task}.yaml")], run=False)
    save = next(c for c in sft.trainer.callbacks if type(c).__name__ == "SavePretrained")
    assert save.merge and rl.model.model_name == f"{save.dirpath}/merged"
    assert sft.model.model_name in PACKAGED and sft.model.turns and type(sft.model.engine).__name__ == "EpisodeEngine"
    # the same environment, episode limits and data on both sides: RL starts where the demonstrations left off
    envs = [m.engine.environment for m in (sft.model, rl.model)]
    assert type(envs[0]) is type(envs[1]) and envs[0].schemas == envs[1].schemas
    assert envs[0].system_prompt == envs[1].system_prompt and getattr(envs[0], "k", 0) == getattr(envs[1], "k", 0)
    assert (sft.model.engine.max_turns, sft.model.engine.max_episode_tokens) == (
        rl.model.engine.max_turns, rl.model.engine.max_episode_tokens)
    assert sft.model.sampling == rl.model.sampling
    assert type(sft.datamodule.source) is type(rl.datamodule.source)
