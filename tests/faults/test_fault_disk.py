"""Fault matrix, the disk: a checkpoint write that fails because the disk is full or read-only (simulated by
:class:`~tests.faults.fault_tools.FullDiskIO`, which works as root). The run stops with an error that names
the folder and what to free or change, the previous checkpoint stays whole, and a run stopped by a signal
still exits 75 when an earlier checkpoint is there to resume from."""

from __future__ import annotations

import signal

import pytest

from lit_grpo.checkpoint import EXIT_INTERRUPTED
from tests.faults.fault_tools import checkpoint_step, config, fit, params, run_subprocess, same_params

FAULTS = "tests.faults.fault_tools"


def _disk_full_from(cfg: dict, save: int, error: str = "ENOSPC") -> dict:
    cfg["trainer"]["plugins"] = [{"class_path": f"{FAULTS}.FullDiskIO", "init_args": {"full_from": save,
                                                                                       "error": error}}]
    return cfg


FIXES = {  # error: what the message must say besides the folder
    "ENOSPC": ["No space left on device", "A checkpoint of this run takes about", "Free at least",
               "or point the checkpoint folder (ModelCheckpoint's dirpath) at a disk with room"],
    "EROFS": ["Read-only file system", "cannot be written: make it writable",
              "or point the checkpoint folder (ModelCheckpoint's dirpath) at a writable one"],
}


@pytest.mark.parametrize("error", FIXES)
def test_a_full_or_read_only_disk_mid_run_names_the_folder_and_the_fix_and_keeps_the_last_checkpoint(
    tmp_path, error
):
    cfg = _disk_full_from(config(tmp_path, steps=4), save=3, error=error)  # steps 1 and 2 are saved
    child = run_subprocess(cfg, tmp_path)
    assert child.returncode == 1, child.stderr_text[-3000:]
    last = child.stderr_text.strip().splitlines()[-1]
    assert last.startswith(f"lit-grpo fit: error: CheckpointWriteError: could not write the checkpoint "
                           f"{tmp_path / 'ckpt' / 'last.ckpt'}: "), last
    assert all(fix in last for fix in FIXES[error]), last
    assert checkpoint_step(tmp_path / "ckpt" / "last.ckpt") == 2  # the previous one, whole
    assert not list((tmp_path / "ckpt").glob(".*.tmp"))  # the failed write left nothing behind


def test_a_signal_on_a_full_disk_exits_75_naming_the_earlier_checkpoint_to_resume_from(tmp_path, reference):
    cfg = _disk_full_from(config(tmp_path, steps=4), save=3)  # the interrupt's checkpoint after step 3 fails
    cfg["trainer"]["callbacks"].append({"class_path": f"{FAULTS}.PauseAt", "init_args": {"step": 2}})
    child = run_subprocess(cfg, tmp_path, signals=[("paused", signal.SIGTERM)])  # in the middle of step 3
    assert child.returncode == EXIT_INTERRUPTED, child.stderr_text[-3000:]
    earlier = tmp_path / "ckpt" / "last.ckpt"
    assert f"could not write the checkpoint {earlier}: No space left on device" in child.stderr_text
    assert f"SIGTERM: stopped after step 3 without its checkpoint; resume from the earlier checkpoint {earlier}" \
        in child.stderr_text
    assert checkpoint_step(earlier) == 2
    resumed = fit(config(tmp_path, steps=4), tmp_path, f"--ckpt_path={earlier}")  # step 3 is trained again
    assert resumed.status == 0, resumed.message
    assert same_params(params(resumed.cli.model), reference["params"])


def test_a_signal_on_a_full_disk_with_no_earlier_checkpoint_exits_1_naming_the_folder(tmp_path):
    cfg = _disk_full_from(config(tmp_path, steps=4), save=1)  # no write succeeds
    cfg["trainer"]["callbacks"].append({"class_path": f"{FAULTS}.PauseAt", "init_args": {"step": 0}})
    child = run_subprocess(cfg, tmp_path, signals=[("paused", signal.SIGTERM)])
    assert child.returncode == 1, child.stderr_text[-3000:]
    assert "CheckpointWriteError: could not write the checkpoint" in child.stderr_text.strip().splitlines()[-1]
    assert not (tmp_path / "ckpt" / "last.ckpt").exists()
