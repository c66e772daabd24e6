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
