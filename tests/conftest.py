"""Test setup: offline hubs, few threads, tiny models built in code."""

import os
import re

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


# ---- the tests that skip for want of an optional extra, for .ci/run's second pass -------------------------------
# .ci/run runs the README's test command on the README's install (no optional extra beyond it), with
# LIT_GRPO_SKIPPED_FOR_EXTRAS=<file>: every test (or module) that skipped because an extra is missing (its reason
# names the install command, `pip install 'lit-grpo[<extra>]'`, or vLLM) is written there by node id, and runs
# again once the extras are installed.
_skipped_for_extras: list[str] = []
_EXTRA_REASON = re.compile(r"lit-grpo\[[\w-]+\]|vllm", re.I)


def _note_extra_skip(report) -> None:
    if report.skipped and isinstance(report.longrepr, tuple) and _EXTRA_REASON.search(str(report.longrepr[-1])):
        _skipped_for_extras.append(report.nodeid)


def pytest_collectreport(report):
    _note_extra_skip(report)


def pytest_runtest_logreport(report):  # a skip marker or fixture skips at setup, one in the test body at call
    _note_extra_skip(report)


def pytest_sessionfinish(session):
    target = os.environ.get("LIT_GRPO_SKIPPED_FOR_EXTRAS")
    if target and not hasattr(session.config, "workerinput"):
        with open(target, "w") as out:
            out.write("".join(f"{nodeid}\n" for nodeid in dict.fromkeys(_skipped_for_extras)))
