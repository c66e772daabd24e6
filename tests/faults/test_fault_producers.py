"""Fault matrix, asynchronous rollout producers (``AsyncRollouts``, k = 1): a producer that stalls (SIGSTOP on its
process, a thread that never returns) or dies (SIGKILL) stops the run with an error naming it, after a checkpoint
that resumes exactly; a SIGTERM while the trainer waits on a stalled producer takes the usual checkpoint-and-exit-75
path; an error on the last batch in flight, which no step trains, still ends the run with that error. Each fault is
made by the producer's engine on its third batch (the one step 3 trains), so the checkpoint is the one after step 2.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import lightning as L
import pytest

from lit_grpo.checkpoint import EXIT_INTERRUPTED
from lit_grpo.rollout import HFGenerateEngine
from lit_grpo.rollout.producer import AUTOMATIC_FACTOR, AUTOMATIC_FLOOR_S, stall_limit
from tests.faults.fault_tools import checkpoint_step, config, fit, params, run_subprocess, same_params

HERE = "tests.faults.test_fault_producers"
#: Releases the threads a ``hang`` fault holds (set when a test ends).
RELEASE = threading.Event()


class Faulty(HFGenerateEngine):
    """The Hugging Face engine, except on its rollout call number ``call`` (0-based, counted in the producer): it
    writes its process id into ``marker`` (when given), then ``stop`` sends SIGSTOP to its own process, ``kill``
    SIGKILL, ``hang`` blocks its thread (until :data:`RELEASE`), ``raise`` raises."""

    def __init__(self, call: int, fault: str, marker: str | None = None) -> None:
        super().__init__()
        self.call, self.fault, self.marker, self.calls = call, fault, marker, 0

    def rollout(self, batch, n, sampling):
        call, self.calls = self.calls, self.calls + 1
        if call == self.call:
            if self.marker is not None:
                Path(self.marker).write_text(str(os.getpid()))
            if self.fault == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
            elif self.fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.fault == "hang":
                RELEASE.wait(timeout=600)
            elif self.fault == "raise":
                raise RuntimeError("the producer's engine broke")
        return super().rollout(batch, n, sampling)


class MarkStep(L.Callback):
    """Writes ``<default_root_dir>/<marker>`` as step ``step`` begins (before its batch is waited for)."""

    def __init__(self, step: int, marker: str) -> None:
        self.step, self.marker = step, marker

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            Path(trainer.default_root_dir, self.marker).touch()


class AwaitLastBatch(L.Callback):
    """At the end of the last step, waits (up to 120 s) until the producer has finished the batch handed over in it,
    which no step trains: the fit ends after that batch was generated (or failed)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == trainer.max_steps and pl_module.engine.pending:
            pl_module.engine.pending[-1].future.exception(timeout=120)


def _engine(producer: str, **options) -> dict:
    return {"model.init_args.engine": {"class_path": "lit_grpo.AsyncRollouts", "init_args": {
        "max_staleness": 1, "producer": producer, **options}}}


def _faulty(tmp, producer: str, fault: str, call: int = 2, **options) -> dict:
    inner = {"class_path": f"{HERE}.Faulty", "init_args": {"call": call, "fault": fault,
                                                           "marker": str(tmp / "stalled")}}
    return config(tmp, steps=4, **_engine(producer, engine=inner, **options))


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict:
    """The parameters after 4 uninterrupted steps at k = 1 (the thread's and the process's are the same)."""
    folder = tmp_path_factory.mktemp("whole")
    outcome = fit(config(folder, steps=4, **_engine("process")), folder)
    assert outcome.status == 0, outcome.message
    return params(outcome.cli.model)


@pytest.fixture(autouse=True)
def _release_hung_threads():
    RELEASE.clear()
    yield
    RELEASE.set()


def _resumes_exactly(tmp, producer: str, whole: dict) -> None:
    """The checkpoint after step 2 resumed to step 4 with a healthy producer ends with the uninterrupted
    parameters."""
    assert checkpoint_step(tmp / "ckpt" / "last.ckpt") == 2
    resumed = fit(config(tmp, steps=4, **_engine(producer)), tmp, f"--ckpt_path={tmp / 'ckpt' / 'last.ckpt'}")
    assert resumed.status == 0, resumed.message
    assert same_params(params(resumed.cli.model), whole)


def _gone(pid: int, wait_s: float = 30) -> bool:
    """Whether process ``pid`` has ended (waiting up to ``wait_s`` for it to be reaped)."""
    deadline = time.monotonic() + wait_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not Path(f"/proc/{pid}").exists()


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("producer", ["process", "thread"])
def test_a_stalled_producer_stops_the_run_naming_it_after_a_checkpoint_that_resumes_exactly(tmp_path, whole,
                                                                                             producer):
    fault = "stop" if producer == "process" else "hang"
    child = run_subprocess(_faulty(tmp_path, producer, fault, producer_timeout_s=5), tmp_path, timeout=180)
    assert child.returncode == 1, child.stderr_text[-3000:]
    last = _last_line(child.stderr_text)
    assert f"the producer {producer}" in last and "finished no job in 5 s" in last, last
    assert "producer_timeout_s" in last and "--ckpt_path" in last, last
    if producer == "process":
        assert "stopped by a signal" in last, last  # what /proc said of it
        assert _gone(int((tmp_path / "stalled").read_text()))  # killed, not left behind
    _resumes_exactly(tmp_path, producer, whole)


@pytest.mark.parametrize("wait", ["step", "checkpoint"])
def test_sigterm_while_waiting_for_a_stalled_producer_saves_and_exits_75(tmp_path, whole, wait):
    """The wait has no limit worth the name here (600 s): the SIGTERM ends it, whether step 3 waits for its batch
    (no scheduled checkpoint at step 2) or step 2's scheduled checkpoint waits for the batch in flight. The step
    is given back, the checkpoint holds the batch in flight as its prompts and the weights it is generated with,
    and the producer is stopped."""
    cfg = _faulty(tmp_path, "process", "stop", producer_timeout_s=600)
    signals = [("stalled", signal.SIGTERM)]
    if wait == "step":
        cfg["trainer"]["callbacks"][0]["init_args"]["every_n_train_steps"] = 100
        cfg["trainer"]["callbacks"].append({"class_path": f"{HERE}.MarkStep", "init_args": {
            "step": 2, "marker": "waiting"}})
        signals = [("stalled", 0), ("waiting", signal.SIGTERM)]
    child = run_subprocess(cfg, tmp_path, signals=signals, timeout=180)
    assert child.returncode == EXIT_INTERRUPTED, child.stderr_text[-3000:]
    assert "SIGTERM: stopped after step 2; checkpoint written to" in child.stderr_text
    assert _gone(int((tmp_path / "stalled").read_text()))
    _resumes_exactly(tmp_path, "process", whole)


def test_a_producer_process_that_dies_is_named_with_its_signal_and_the_fix(tmp_path, whole):
    child = run_subprocess(_faulty(tmp_path, "process", "kill"), tmp_path, timeout=180)
    assert child.returncode == 1, child.stderr_text[-3000:]
    last = _last_line(child.stderr_text)
    assert "the producer process" in last and "killed by SIGKILL" in last, last
    assert "memory" in last and "producer: thread" in last, last  # the usual cause, and the fixes
    assert "BrokenProcessPool" not in child.stderr_text
    _resumes_exactly(tmp_path, "process", whole)


@pytest.mark.parametrize("producer", ["thread", "process"])
def test_an_error_on_the_last_batch_in_flight_ends_the_run_with_it(tmp_path, producer):
    """Batch 4 is handed over in the last step and never trained; the producer raises on it. No checkpoint is
    written at that step, so only the end of the fit sees it."""
    cfg = _faulty(tmp_path, producer, "raise", call=4)
    cfg["trainer"]["callbacks"] = [{"class_path": f"{HERE}.AwaitLastBatch"}]
    cfg["trainer"]["enable_checkpointing"] = False
    outcome = fit(cfg, tmp_path)
    assert outcome.status == 1, outcome.message
    assert "the producer's engine broke" in outcome.message and f"producer {producer}" in outcome.message


def test_the_automatic_limit_is_a_multiple_of_the_slowest_job_with_a_floor():
    assert stall_limit(None, slowest_s=0.0) == AUTOMATIC_FLOOR_S  # nothing measured yet: the floor
    assert stall_limit(None, slowest_s=AUTOMATIC_FLOOR_S) == AUTOMATIC_FACTOR * AUTOMATIC_FLOOR_S
    assert stall_limit(7.5, slowest_s=1000.0) == 7.5  # the option, as given
    assert stall_limit(7.5, slowest_s=0.0, starting=True) == AUTOMATIC_FLOOR_S  # a process's start is no stall


def test_a_bad_limit_is_named():
    from lit_grpo.rollout import AsyncRollouts

    with pytest.raises(ValueError, match=r"producer_timeout_s=0 must be > 0 \(seconds\), or null"):
        AsyncRollouts(producer_timeout_s=0)
