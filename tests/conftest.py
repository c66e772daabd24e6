"""Test setup: offline hubs, few threads, tiny models built in code."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """A randomly initialised character-level Qwen2 (~0.6M parameters) saved with save_pretrained."""
    from lit_grpo.models.tiny import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-model"), size="tiny", seed=0))


@pytest.fixture(scope="session")
def sft_model_path() -> str:
    """The committed starting policy of the quickstart (learned two-digit addition to ~0.3 sampled accuracy)."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "assets" / "tiny-arith-sft"
    if not (path / "model.safetensors").exists():
        pytest.fail(f"{path} is missing: regenerate it with `lit-grpo fit --config configs/sft_tiny.yaml`")
    return str(path)


@pytest.fixture(autouse=True)
def _fresh_reward_failure_log():
    """Each test sees a reward's first failure logged: the guarded path logs each kind of failure once per
    reward and process (:mod:`lit_grpo.rewards.scoring`), and the test process is shared."""
    from lit_grpo.rewards import scoring

    scoring._logged.clear()
    yield
