"""Fixtures of the fault matrix: one uninterrupted 4-step run whose checkpoints the cases start from."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.faults.fault_tools import config, fit, params


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> dict:
    """A 4-step run with sampled rollouts, a checkpoint kept for every step: ``folder``, ``params`` (at
    step 4) and ``step(k)``, the path of the checkpoint after step ``k``."""
    folder = tmp_path_factory.mktemp("reference")
    cfg = config(folder, steps=4)
    cfg["trainer"]["callbacks"][0]["init_args"] |= {"save_top_k": -1, "filename": "{step}"}
    outcome = fit(cfg, folder)
    assert outcome.status == 0, outcome.message
    return {"folder": folder, "params": params(outcome.cli.model),
            "step": lambda k: folder / "ckpt" / f"step={k}.ckpt"}  # fmt: skip


@pytest.fixture
def run_dir(tmp_path, reference) -> Path:
    """A run folder whose ``ckpt/last.ckpt`` is the reference run's checkpoint after step 2: what an
    earlier part of the run saved, which no fault may lose."""
    (tmp_path / "ckpt").mkdir()
    shutil.copy(reference["step"](2), tmp_path / "ckpt" / "last.ckpt")
    return tmp_path
