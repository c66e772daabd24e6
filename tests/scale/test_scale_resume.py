"""Resume after SIGKILL, at an epoch boundary and after Ctrl-C reproduces the uninterrupted run exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from lit_grpo.checkpoint import SaveOnInterrupt
from lit_grpo.losses import PPOClip
from tests.scale import train_tiny

pytestmark = pytest.mark.slow

STEPS = 6
SAMPLED = {"engine": "hf", "loss": PPOClip(), "num_iterations": 1}  # real sampling: the random state matters


def _metrics(folder: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {r.pop("step"): r for r in rows}


def _same_params(a: Path, b: Path) -> None:
    ours, theirs = torch.load(a / "params.pt"), torch.load(b / "params.pt")
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert torch.equal(ours[k], theirs[k]), k


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted")
    train_tiny.run_single(out, STEPS, **SAMPLED)
    return out


def test_sigkill_mid_training_resumes_exactly(uninterrupted, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(train_tiny.__file__).parents[2])}
    cmd = [
        sys.executable,
        train_tiny.__file__,
        "kill",
        str(tmp_path),
        "--steps",
        str(STEPS),
        "--kill-at",
        "3",
        "--threads",
        str(torch.get_num_threads()),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert sorted(_metrics(tmp_path)) == [1, 2, 3]  # killed during step 4, before it was logged
    last = tmp_path / "ckpt" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 3
    train_tiny.run_single(tmp_path, STEPS, resume=str(last), **SAMPLED)
    _same_params(tmp_path, uninterrupted)
    assert _metrics(tmp_path) == _metrics(uninterrupted)  # rewards, lengths, loss, entropy... of every step


MINI = {**SAMPLED, "steps_per_generation": 2}  # two optimizer steps per rollout batch


def test_sigkill_between_the_optimizer_steps_of_a_rollout_batch_resumes_exactly(tmp_path):
    """Killed in the second optimizer step of the second rollout batch: the checkpoint is the one written after
    the first batch (checkpoints fall between rollout batches), and the resumed run is the uninterrupted one."""
    whole = tmp_path / "whole"
    train_tiny.run_single(whole, STEPS, **MINI)
    assert sorted(_metrics(whole)) == [2, 4, 6]  # one row per rollout batch, at its last optimizer step
    env = {**os.environ, "PYTHONPATH": str(Path(train_tiny.__file__).parents[2])}
    cmd = [sys.executable, train_tiny.__file__, "kill", str(tmp_path / "parts"), "--steps", str(STEPS), "--kill-at", "3",
           "--steps-per-generation", "2", "--threads", str(torch.get_num_threads())]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    last = tmp_path / "parts" / "ckpt" / "last.ckpt"
    assert sorted(_metrics(tmp_path / "parts")) == [2] and torch.load(last, weights_only=True)["global_step"] == 2
    train_tiny.run_single(tmp_path / "parts", STEPS, resume=str(last), **MINI)
    _same_params(tmp_path / "parts", whole)
    assert _metrics(tmp_path / "parts") == _metrics(whole)


def test_resume_at_an_epoch_boundary_continues(tmp_path):
    """8 prompts, 2 per step: an epoch is 4 steps; the checkpoint of step 4 ends epoch 0."""

    def run(folder: Path, steps: int, resume: str | None = None):
        L.seed_everything(0)
        grpo = train_tiny.module(**SAMPLED)
        checkpoint = L.pytorch.callbacks.ModelCheckpoint(
            dirpath=folder / "ckpt", save_last=True, save_top_k=0, every_n_train_steps=1
        )
        fit = train_tiny.trainer(folder, steps, callbacks=[checkpoint])
        fit.fit(
            grpo,
            datamodule=train_tiny.PromptDataModule(train_tiny.source(8), prompts_per_step=2),
            ckpt_path=resume,
        )
        train_tiny.save_params(fit, grpo, folder)
        return fit

    run(tmp_path / "whole", 6)
    run(tmp_path / "parts", 4)
    resumed = run(tmp_path / "parts", 6, resume=str(tmp_path / "parts" / "ckpt" / "last.ckpt"))
    assert resumed.global_step == 6 and resumed.current_epoch >= 1
    assert sorted(_metrics(tmp_path / "parts")) == [1, 2, 3, 4, 5, 6]
    _same_params(tmp_path / "parts", tmp_path / "whole")
    assert _metrics(tmp_path / "parts") == _metrics(tmp_path / "whole")


class SendCtrlC(L.Callback):
    """Sends SIGINT to this process in the middle of the step after ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_finishes_the_step_and_writes_a_clean_checkpoint(uninterrupted, tmp_path):
    L.seed_everything(0)
    grpo = train_tiny.module(**SAMPLED)
    interrupt = SaveOnInterrupt()
    fit = train_tiny.trainer(tmp_path, STEPS, callbacks=[SendCtrlC(2), interrupt])
    previous = signal.getsignal(signal.SIGINT)
    fit.fit(grpo, datamodule=train_tiny.PromptDataModule(train_tiny.source(), prompts_per_step=2))
    assert signal.getsignal(signal.SIGINT) == previous  # the handler is removed after fit
    assert fit.global_step == 3  # the interrupted step was finished, then training stopped
    assert interrupt.saved_path == tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(interrupt.saved_path, weights_only=True)["global_step"] == 3
    train_tiny.run_single(tmp_path, STEPS, resume=str(interrupt.saved_path), **SAMPLED)
    _same_params(tmp_path, uninterrupted)
    assert _metrics(tmp_path) == _metrics(uninterrupted)
