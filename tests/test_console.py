"""What a run prints: a bar of the run's steps across passes over the prompts, a summary without FLOPs, no
advertising tips from the libraries."""

from __future__ import annotations

import logging

import pytest
from lightning.pytorch.callbacks import Callback, RichProgressBar, TQDMProgressBar
from lightning.pytorch.utilities import rank_zero_info

from lit_grpo.cli import LitGRPOCLI
from lit_grpo.console import TIP, PolicySummary, StepProgressBar, StepTQDMProgressBar, quiet_libraries
from tests.lab.helpers import ROOT

# 4 training prompts, 2 a step: a pass over them is 2 steps, the run 5
ARGS = ["--config", "configs/quickstart.yaml", "--trainer.max_steps=5", "--trainer.val_check_interval=null",
        "--trainer.limit_val_batches=0", "--trainer.logger=false", "--trainer.enable_checkpointing=false",
        "--trainer.callbacks=[]", "--data.prompts_per_step=2", "--data.source.init_args.num_train=4",
        "--model.group_size=2"]


def _fit(tmp_path, monkeypatch, *extra):
    monkeypatch.chdir(ROOT)
    cli = LitGRPOCLI(args=[*ARGS, f"--trainer.default_root_dir={tmp_path}", *extra], run=False)
    cli.before_fit()
    cli.trainer.fit(cli.model, cli.datamodule)
    return cli.trainer


def test_the_tqdm_bar_counts_the_runs_steps_across_passes(tmp_path, monkeypatch):
    trainer = _fit(tmp_path, monkeypatch,
                   "--trainer.callbacks+=lightning.pytorch.callbacks.TQDMProgressBar")
    assert trainer.current_epoch >= 2  # the run went over its prompts more than once
    bar = trainer.progress_bar_callback
    assert type(bar) is StepTQDMProgressBar
    assert (bar.train_progress_bar.total, bar.train_progress_bar.n) == (5, 5)
    assert bar.train_progress_bar.desc.startswith("Step")


class Seen(Callback):
    """The rich bar's training task after each step (the bar itself is stopped at the end of the run)."""

    def __init__(self) -> None:
        self.tasks = []

    def on_train_batch_end(self, trainer, *args) -> None:
        bar = trainer.progress_bar_callback
        task = bar.progress.tasks[bar.train_progress_bar_id]
        self.tasks.append((task.total, task.completed, task.description.strip()))


def test_the_rich_bar_counts_the_runs_steps_across_passes(tmp_path, monkeypatch):
    pytest.importorskip("rich")
    seen = Seen()
    monkeypatch.setattr(LitGRPOCLI, "before_fit", _and_then(LitGRPOCLI.before_fit, seen))
    trainer = _fit(tmp_path, monkeypatch, "--trainer.callbacks+=lightning.pytorch.callbacks.RichProgressBar")
    assert type(trainer.progress_bar_callback) is StepProgressBar and trainer.current_epoch >= 2
    assert seen.tasks == [(5, k, "Step") for k in range(1, 6)]


def _and_then(before_fit, callback):
    def patched(self) -> None:
        before_fit(self)
        self.trainer.callbacks.append(callback)  # after the bar: it reads what the bar showed

    return patched


def test_a_subclassed_bar_is_left_as_the_user_configured_it(tmp_path, monkeypatch):
    class Mine(TQDMProgressBar):
        pass

    monkeypatch.chdir(ROOT)
    cli = LitGRPOCLI(args=[*ARGS, f"--trainer.default_root_dir={tmp_path}"], run=False)
    cli.trainer.callbacks[:] = [c for c in cli.trainer.callbacks
                                if not isinstance(c, RichProgressBar | TQDMProgressBar)] + [Mine()]
    cli.before_fit()
    assert type(cli.trainer.progress_bar_callback) is Mine


def test_the_summary_has_no_flops(caplog):
    caplog.set_level(logging.INFO)
    PolicySummary.summarize([(" ", ["0"]), ("Name", ["policy"]), ("Type", ["Linear"]), ("Params", ["10"]),
                             ("Mode", ["train"]), ("FLOPs", ["0"])], 10, 10, 0.0, {"train": 1, "eval": 0}, 0)
    text = caplog.text
    assert "policy" in text and "Trainable params" in text and "flops" not in text.lower()


def test_lightnings_tips_are_dropped_and_other_messages_kept(caplog):
    caplog.set_level(logging.INFO)
    quiet_libraries()
    quiet_libraries()  # idempotent
    rank_zero_info(TIP + " uploads, try installing something")
    rank_zero_info("GPU available: False, used: False")
    assert "Tip" not in caplog.text and "GPU available" in caplog.text


def test_a_resumed_fit_counts_on_from_the_checkpoints_step(tmp_path, monkeypatch):
    tqdm = "--trainer.callbacks+=lightning.pytorch.callbacks.TQDMProgressBar"
    first = _fit(tmp_path / "a", monkeypatch, tqdm, "--trainer.max_steps=3")
    first.save_checkpoint(tmp_path / "step3.ckpt")
    monkeypatch.chdir(ROOT)
    cli = LitGRPOCLI(args=[*ARGS, f"--trainer.default_root_dir={tmp_path / 'b'}", tqdm], run=False)
    cli.before_fit()
    cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=str(tmp_path / "step3.ckpt"))
    assert cli.trainer.current_epoch >= 1  # resumed past the first pass over the prompts
    bar = cli.trainer.progress_bar_callback.train_progress_bar
    assert (bar.total, bar.n) == (5, 5) and bar.desc.startswith("Step")
