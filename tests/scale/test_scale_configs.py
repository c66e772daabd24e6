"""The scale configs parse with their launch command on top; the LoRA config runs on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import ModelParallelStrategy

from lit_grpo.checkpoint import AtomicCheckpointIO, SaveOnInterrupt
from lit_grpo.cli import LitGRPOCLI
from lit_grpo.commands import main

ROOT = Path(__file__).resolve().parents[2]
SCALE = {"gpu1.yaml": (1, 1), "gpu8_fsdp.yaml": (8, 1), "multinode.yaml": (8, 2)}  # devices, nodes


@pytest.fixture(autouse=True)
def _run_from_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("name", sorted(SCALE))
def test_scale_configs_are_headed_by_their_launch_command_and_build(name):
    config = f"configs/scale/{name}"
    first = (ROOT / config).read_text().splitlines()[0]
    assert first.startswith("# ") and f"--config {config}" in first
    assert ("torchrun" in first) == (name != "gpu1.yaml")
    # the GPU-only settings are replaced so that the rest builds here
    cli = LitGRPOCLI(
        args=["--config", config, "--trainer.accelerator=cpu", "--model.engine=lit_grpo.HFGenerateEngine"],
        run=False,
    )
    devices, nodes = SCALE[name]
    assert cli.trainer.num_devices == devices and cli.trainer.num_nodes == nodes
    assert cli.trainer.precision == "bf16-mixed" and cli.model.gradient_checkpointing
    if devices * nodes > 1:
        assert isinstance(cli.trainer.strategy, ModelParallelStrategy)
        assert cli.trainer.strategy._data_parallel_size == devices * nodes
        assert "--nproc_per_node 8" in first and (nodes == 1 or "--nnodes 2" in first)
    checkpoints = [c for c in cli.trainer.callbacks if isinstance(c, ModelCheckpoint)]
    assert checkpoints and all(c.save_last for c in checkpoints)


def test_the_cli_writes_checkpoints_atomically_and_saves_on_ctrl_c():
    cli = LitGRPOCLI(args=["--config", "configs/quickstart.yaml"], run=False)
    assert isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    assert any(isinstance(c, SaveOnInterrupt) for c in cli.trainer.callbacks)


@pytest.mark.slow
def test_lora_config_trains_and_exports_adapters(tmp_path, monkeypatch, sft_model_path):
    monkeypatch.chdir(tmp_path)  # the config writes runs/ under the working directory
    main(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "lora.yaml"),
            f"--model.init_args.model={sft_model_path}",
            "--trainer.max_steps=2",
            "--trainer.val_check_interval=2",
            "--data.max_val_prompts=8",
            "--trainer.enable_progress_bar=false",
        ]
    )
    adapters = tmp_path / "runs" / "lora" / "adapters"
    assert (adapters / "adapter_config.json").exists() and (adapters / "adapter_model.safetensors").exists()
    assert (adapters / "merged" / "model.safetensors").exists()


def test_fsdp1_without_original_parameters_is_refused_with_the_fix():
    from lightning.pytorch.strategies import FSDPStrategy

    from lit_grpo.models.loading import load_policy
    from lit_grpo.parallel import wrap_fsdp1

    policy = load_policy(str(ROOT / "assets" / "tiny-arith-sft"))
    with pytest.raises(ValueError, match=r"use_orig_params=False\).*set it to True"):
        wrap_fsdp1(policy, FSDPStrategy(use_orig_params=False))
