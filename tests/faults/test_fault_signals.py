"""Fault matrix, signals: a scheduler's SIGTERM, SIGUSR1 or SIGUSR2 (submitit's warning) mid-run, signals
during a checkpoint write and Ctrl-C. The run writes a checkpoint after the current step and exits 75 (interrupted, resumable); resumed
from it, the run ends with exactly the parameters of the uninterrupted run. Sent from the test to a child
``python -m lit_grpo fit`` where the exit status is the point, in-process otherwise."""

from __future__ import annotations

import signal

import pytest
import torch

from lit_grpo.checkpoint import EXIT_INTERRUPTED
from tests.faults.fault_tools import checkpoint_step, config, fit, params, run_subprocess, same_params

FAULTS = "tests.faults.fault_tools"


def _resume_to_the_end(tmp, reference) -> None:
    outcome = fit(config(tmp, steps=4), tmp, f"--ckpt_path={tmp / 'ckpt' / 'last.ckpt'}")
    assert outcome.status == 0, outcome.message
    assert same_params(params(outcome.cli.model), reference["params"])


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2], ids=["SIGTERM", "SIGUSR1", "SIGUSR2"]
)
def test_a_signal_mid_run_saves_after_the_step_exits_75_and_resumes_exactly(tmp_path, reference, signum):
    cfg = config(tmp_path, steps=4)
    cfg["trainer"]["callbacks"].append({"class_path": f"{FAULTS}.PauseAt", "init_args": {"step": 1}})
    child = run_subprocess(cfg, tmp_path, signals=[("paused", signum)])  # sent in the middle of step 2
    assert child.returncode == EXIT_INTERRUPTED, child.stderr_text[-3000:]
    assert f"{signum.name}: stopped after step 2; checkpoint written to" in child.stderr_text
    assert checkpoint_step(tmp_path / "ckpt" / "last.ckpt") == 2
    _resume_to_the_end(tmp_path, reference)


def _validating_every_step(tmp, pause: dict) -> dict:
    cfg = config(tmp, steps=4, **{"trainer.limit_val_batches": 1, "trainer.val_check_interval": 1,
                                  "trainer.check_val_every_n_epoch": None, "trainer.num_sanity_val_steps": 0})
    cfg["trainer"]["callbacks"] += [pause, {"class_path": f"{FAULTS}.RecordValidations"}]
    return cfg


def _validations(tmp) -> list[str]:
    return sorted(p.name for p in tmp.glob("validated-*"))


def test_sigterm_during_validation_finishes_it_saves_and_exits_without_another_step_or_validation(
    tmp_path, reference
):
    cfg = _validating_every_step(tmp_path, {"class_path": f"{FAULTS}.PauseInValidation", "init_args": {"step": 2}})
    child = run_subprocess(cfg, tmp_path, signals=[("paused", signal.SIGTERM)])
    assert child.returncode == EXIT_INTERRUPTED, child.stderr_text[-3000:]
    assert "SIGTERM: stopped after the validation of step 2; checkpoint written to" in child.stderr_text
    assert checkpoint_step(tmp_path / "ckpt" / "last.ckpt") == 2  # no step 3
    assert _validations(tmp_path) == ["validated-1", "validated-2"]  # the one in progress finished; no second
    _resume_to_the_end(tmp_path, reference)


def test_a_signal_mid_step_runs_no_validation_after_it(tmp_path, reference):
    cfg = _validating_every_step(tmp_path, {"class_path": f"{FAULTS}.PauseAt", "init_args": {"step": 1}})
    child = run_subprocess(cfg, tmp_path, signals=[("paused", signal.SIGTERM)])
    assert child.returncode == EXIT_INTERRUPTED, child.stderr_text[-3000:]
    assert "SIGTERM: stopped after step 2; checkpoint written to" in child.stderr_text
    assert _validations(tmp_path) == ["validated-1"]  # neither step 2's own validation nor a stopping one
    _resume_to_the_end(tmp_path, reference)


def _stopping(window_s: float) -> dict:
    """The run's own SaveOnInterrupt, in place of the CLI's: a second SIGTERM within ``window_s`` of the
    first is the same request, a later one ends the process at once."""
    return {"class_path": "lit_grpo.checkpoint.SaveOnInterrupt", "init_args": {"repeat_window_s": window_s}}


def test_sigterm_during_a_checkpoint_write_and_again_during_the_next_keeps_the_last_whole(tmp_path, reference):
    cfg = config(tmp_path, steps=4)
    cfg["trainer"]["plugins"] = [{"class_path": f"{FAULTS}.PausingIO", "init_args": {"pauses": [2, 3]}}]
    cfg["trainer"]["callbacks"].append(_stopping(0))  # every second SIGTERM comes after the window
    # save 2 is the scheduled checkpoint of step 2: SIGTERM arrives in the middle of it; the write goes
    # on, step 3 runs, and save 3 (the interrupt's checkpoint) is cut short by a second SIGTERM
    child = run_subprocess(cfg, tmp_path, signals=[("saving-2", signal.SIGTERM), ("saving-3", signal.SIGTERM)])
    assert child.returncode == -signal.SIGTERM, child.stderr_text[-3000:]
    assert "s after the first: ending at once, without a new checkpoint" in child.stderr_text
    assert list((tmp_path / "ckpt").glob(".last.ckpt.*tmp"))  # the write in progress was left unfinished
    assert checkpoint_step(tmp_path / "ckpt" / "last.ckpt") == 2  # the last whole checkpoint
    _resume_to_the_end(tmp_path, reference)


def test_a_second_sigterm_within_the_window_is_the_same_request_saves_and_exits_75(tmp_path, reference):
    # as a wrapper that passes SIGTERM on and the scheduler that signals the whole process group send it
    cfg = config(tmp_path, steps=4)
    cfg["trainer"]["callbacks"] += [{"class_path": f"{FAULTS}.PauseAt", "init_args": {"step": 1, "again": "asked"}},
                                    _stopping(600)]  # a window no loaded machine outlasts
    child = run_subprocess(cfg, tmp_path, signals=[("paused", signal.SIGTERM), ("asked", signal.SIGTERM)])
    assert child.returncode == EXIT_INTERRUPTED, child.stderr_text[-3000:]
    assert "s after the first (within repeat_window_s=600): the same request" in child.stderr_text
    assert "SIGTERM: stopped after step 2; checkpoint written to" in child.stderr_text
    assert checkpoint_step(tmp_path / "ckpt" / "last.ckpt") == 2
    _resume_to_the_end(tmp_path, reference)


def test_a_second_ctrl_c_aborts_at_once_without_a_new_checkpoint(tmp_path):
    cfg = config(tmp_path, steps=4)
    cfg["trainer"]["callbacks"].append({"class_path": f"{FAULTS}.PauseAt", "init_args": {"step": 1, "again": "asked"}})
    child = run_subprocess(cfg, tmp_path, signals=[("paused", signal.SIGINT), ("asked", signal.SIGINT)])
    assert child.returncode == 1, child.stderr_text[-3000:]
    assert "Ctrl-C again to abort at once" in child.stderr_text
    assert checkpoint_step(tmp_path / "ckpt" / "last.ckpt") == 1  # step 2 neither finished nor saved


def test_ctrl_c_mid_run_saves_after_the_step_and_exits_75(tmp_path):
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    cfg = config(tmp_path, steps=4)
    cfg["trainer"]["callbacks"].append({"class_path": f"{FAULTS}.SendSignal", "init_args": {"step": 0}})
    outcome = fit(cfg, tmp_path)
    assert outcome.status == EXIT_INTERRUPTED and outcome.cli.trainer.global_step == 1
    assert checkpoint_step(tmp_path / "ckpt" / "last.ckpt") == 1
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == previous  # handlers restored


@pytest.mark.parametrize("producer", ["thread", "process"])
def test_sigterm_with_batches_in_flight_exits_75_and_resumes_exactly(tmp_path, producer):
    asynchronous = {"model.init_args.engine": {"class_path": "lit_grpo.AsyncRollouts",
                                               "init_args": {"max_staleness": 2, "producer": producer}}}
    whole = fit(config(tmp_path / "whole", steps=5, **asynchronous), tmp_path / "whole")
    assert whole.status == 0, whole.message
    cfg = config(tmp_path, steps=5, **asynchronous)
    cfg["trainer"]["callbacks"].append({"class_path": f"{FAULTS}.PauseAt", "init_args": {"step": 1}})
    child = run_subprocess(cfg, tmp_path, signals=[("paused", signal.SIGTERM)])
    assert child.returncode == EXIT_INTERRUPTED, child.stderr_text[-3000:]
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 2 and len(saved["lit_grpo_engine"][0]["pending"]) == 2  # the full pipeline
    resumed = fit(config(tmp_path, steps=5, **asynchronous), tmp_path, f"--ckpt_path={tmp_path / 'ckpt' / 'last.ckpt'}")
    assert resumed.status == 0, resumed.message  # step 5 trains a batch generated after the resume
    assert same_params(params(resumed.cli.model), params(whole.cli.model))
