"""Running the grid: prepare steps once, then each run as its own ``lit-grpo fit`` process.

A run writes ``run.log`` (its output), ``command.txt``, ``attempt.json`` and, when it ends, ``status.json``
(``{"status": "done" | "failed", "returncode", "seconds", "args", "log", "attempt"}``, and ``resumed_from``
when it went on from a checkpoint). A run whose ``status.json`` says done with the same arguments is skipped
next time. A run stopped from outside (:func:`interruption`: exit 75, killed by a signal, lost with its worker
or job) with the same arguments, or started by this grid and never recorded, goes on from the newest
``last.ckpt`` in its directory; any other failed, unfinished or changed run starts again from an empty
directory. A crash stays inside its process: it is recorded and the others go on.
The runs execute on this machine, or on a Ray cluster or Slurm (:mod:`lit_grpo.lab.executors`, whose docstring
states the retry rule).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from lit_grpo.lab import child
from lit_grpo.lab.child import STATUS_FILE, read_status
from lit_grpo.lab.executors import Executor, LocalExecutor, WorkerLost
from lit_grpo.lab.grid import Run, prepare_args, prepare_output, shell_command, substitute
from lit_grpo.lab.spec import Experiment, Prepare, Resources

#: The exit status of a ``lit-grpo fit`` child stopped by a signal after writing its checkpoint (interrupted,
#: resumable): the trainer's ``lit_grpo.checkpoint.EXIT_INTERRUPTED``, which the lab reads from the child's
#: exit status and does not import (tests/lab/test_exp_executors.py holds the two equal).
EXIT_INTERRUPTED = 75
ATTEMPT_FILE = "attempt.json"
PREPARED_FILE = ".prepared.json"


def default_jobs(threads_per_run: int) -> int:
    """Parallel runs that fit the machine: CPU cores // threads per run (at least 1)."""
    return max(1, (os.cpu_count() or 1) // threads_per_run)


def needs_run(run: Run, retry_failed: bool = True) -> bool:
    """False when the run finished with these arguments (done, or failed and not retried)."""
    status = read_status(run.run_dir)
    if status is None or status.get("args") != list(run.args):
        return True
    return status.get("status") != "done" and retry_failed


def interruption(returncode: int | str | None) -> str | None:
    """How a run that ended with ``returncode`` was stopped from outside, in words, or None when it failed on
    its own error (or succeeded). Stopped from outside: exit 75 (a signal, after its checkpoint was written),
    a negative return code (its child killed by that signal), ``"lost: ..."`` (its worker or job died). Such
    a run is submitted again (at most ``retries`` times) and resumes from its checkpoint; ``"timeout"``
    (``--run-timeout``), ``"error: ..."`` (its task raised) and any other exit status are its own."""
    if isinstance(returncode, str):
        cause = returncode.removeprefix("lost: ")
        return f"its worker or job died ({cause})" if cause != returncode else None
    if returncode == EXIT_INTERRUPTED:
        return "exit 75 (interrupted, e.g. pre-empted)"
    if isinstance(returncode, int) and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return None


def _attempts(run_dir: Path, token: str) -> int:
    """How many times this grid (``token``) has started the run: more than 1 after a worker died or a
    pre-emption."""
    try:
        last = json.loads((run_dir / ATTEMPT_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return 0
    return last["attempt"] if last.get("token") == token else 0


def resume_checkpoint(run: Run, token: str = "") -> Path | None:
    """The checkpoint ``run`` goes on from: the newest ``last.ckpt`` in its directory when the directory holds
    an attempt of these arguments stopped from outside (``status.json``: :func:`interruption`), or one this
    grid (``token``) started and never recorded; else None (the run starts from scratch)."""
    status = read_status(run.run_dir)
    if status is None:
        interrupted = _attempts(run.run_dir, token) > 0
    else:
        interrupted = (interruption(status.get("returncode")) is not None
                       and status.get("args") == list(run.args))
    found = sorted(run.run_dir.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime) if interrupted else []
    return found[-1] if found else None


def run_one(run: Run, threads: int, timeout: float | None = None, token: str = "") -> dict:
    """Run one grid cell and record its status: from the checkpoint of its interrupted attempt
    (:func:`resume_checkpoint`; the log goes on after that attempt's), else from an empty directory."""
    attempt = _attempts(run.run_dir, token) + 1
    checkpoint, earlier = resume_checkpoint(run, token), read_status(run.run_dir) or {}
    args = run.args if checkpoint is None else (*run.args, f"--ckpt_path={checkpoint}")
    if checkpoint is None and run.run_dir.exists():
        shutil.rmtree(run.run_dir)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    (run.run_dir / STATUS_FILE).unlink(missing_ok=True)  # unfinished until this attempt ends
    (run.run_dir / ATTEMPT_FILE).write_text(json.dumps({"token": token, "attempt": attempt}))
    (run.run_dir / "command.txt").write_text(shell_command(args, threads) + "\n")
    if checkpoint is not None:
        with open(run.log_path, "a") as log:
            log.write(f"\n[lit-grpo compare] attempt {attempt}: resuming from {checkpoint}\n")
    rc, seconds = child.call(args, run.log_path, threads, timeout, append=checkpoint is not None)
    if checkpoint is not None:  # the run's time is that of all its attempts
        return _record(run, rc, seconds + earlier.get("seconds", 0), attempt, checkpoint)
    return _record(run, rc, seconds, attempt)


def _record(run: Run, rc: int | str, seconds: float, attempt: int, resumed_from: Path | None = None) -> dict:
    status = {"status": "done" if rc == 0 else "failed", "returncode": rc, "seconds": round(seconds, 2),
              "args": list(run.args), "log": str(run.log_path), "attempt": attempt}
    if resumed_from is not None:
        status["resumed_from"] = str(resumed_from)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    (run.run_dir / STATUS_FILE).write_text(json.dumps(status, indent=1))
    return status


def run_prepare(exp: Experiment, root: str | Path = "runs/experiments", threads: int = 1,
                echo: Callable[[str], None] = print, executor: Executor | None = None) -> dict[str, Path]:
    """Run each prepare step whose output is not cached yet, here or as a task of ``executor`` (with the
    experiment's resources); their output directories by name."""
    outputs = {}
    for step in exp.prepare:
        output = prepare_output(step, exp.quick, root)
        args = tuple(substitute(a, outputs, output=output) for a in prepare_args(step, exp.quick))
        args += (f"--trainer.logger.init_args.save_dir={output}-logs", "--trainer.enable_progress_bar=false")
        outputs[step.name] = output
        marker = output / PREPARED_FILE
        if marker.is_file() and json.loads(marker.read_text()).get("args") == list(args):
            echo(f"prepare {step.name}: cached at {output}")
            continue
        log = Path(f"{output}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        echo(f"prepare {step.name}: {shell_command(args, threads)}")
        rc, seconds = _prepare(step.name, output, (args, log, threads, None), exp.resources, executor, echo)
        if rc != 0 or not output.is_dir():
            raise RuntimeError(f"prepare step {step.name!r} failed (exit {rc}, no {output}); see {log}")
        reached = _check_requirement(step, exp.quick, output, echo)
        marker.write_text(json.dumps({"args": list(args), "seconds": round(seconds, 2), **reached}))
        echo(f"prepare {step.name}: done in {seconds:.0f} s -> {output}")
    return outputs


def _prepare(name: str, output: Path, call: tuple, resources: Resources, executor: Executor | None,
             echo: Callable[[str], None]) -> tuple[int | str, float]:
    """A prepare step's (return code, seconds), from an empty ``output``: here, or as a task of ``executor``,
    submitted again from scratch while it is stopped from outside (:func:`interruption`), at most
    ``executor.retries`` times."""
    retried = 0
    while True:
        shutil.rmtree(output, ignore_errors=True)
        shutil.rmtree(f"{output}-logs", ignore_errors=True)  # the requirement reads this step's log alone
        if executor is None:
            return child.call(*call)
        try:
            rc, seconds = executor.result(executor.submit(resources, child.call, *call))
        except WorkerLost as err:
            rc, seconds = f"lost: {err}", 0.0
        why = interruption(rc)
        if why is None or retried == executor.retries:
            return rc, seconds
        retried += 1
        echo(f"prepare {name}: {why}; submitted again")


def _check_requirement(step: Prepare, quick: bool, output: Path, echo: Callable[[str], None]) -> dict:
    """The value a prepare step's requirement reached (``{}`` without one, or in quick mode, whose shortened
    step is not meant to reach it); a RuntimeError when it misses, so that no run starts from an output
    the experiment does not assume. The output stays on disk, unmarked: the next call runs the step again."""
    from lit_grpo.lab.collect import read_scalars, reduce_series  # collect imports this module

    if step.require is None:
        return {}
    want = step.require.describe()
    if quick:
        echo(f"prepare {step.name}: requirement {want} not checked in quick mode")
        return {}
    scalars: dict = {}
    for events in sorted({p.parent for p in Path(f"{output}-logs").rglob("events.out.tfevents.*")}):
        scalars.update(read_scalars(events))
    value = reduce_series(scalars.get(step.require.metric.name, []), step.require.metric.reduce)
    if not step.require.met(value):
        got = "was never logged" if value != value else f"reached {value:.4g}"
        raise RuntimeError(
            f"prepare step {step.name!r} did not meet its requirement {want}: {step.require.metric.name} "
            f"{got} (log: {output}-logs, output kept unmarked in {output}). The experiment's runs assume it; "
            f"change the step (more steps, another lr) or the requirement, then run again"
        )
    echo(f"prepare {step.name}: requirement {want} met ({value:.4g})")
    return {"required": want, "reached": value}


def prepared_outputs(exp: Experiment, root: str | Path = "runs/experiments") -> dict[str, Path]:
    """The output directories of the prepare steps (whether or not they exist yet)."""
    return {step.name: prepare_output(step, exp.quick, root) for step in exp.prepare}


class Progress:
    """One line per finished run: ``[done/total] ok|FAILED run-id (seconds)``; with ``state``, a line of how
    many runs wait, run, finished and failed, and the cluster's free resources."""

    def __init__(self, total: int, done: int, echo: Callable[[str], None] = print) -> None:
        self.total, self.done, self.failed, self.echo = total, done, 0, echo

    def finished(self, run: Run, status: dict) -> None:
        self.done += 1
        ok = status["status"] == "done"
        self.failed += not ok
        tail = "" if ok else f"  exit {status['returncode']}, log: {status['log']}"
        retried = f", retried: attempt {status['attempt']}" if status.get("attempt", 1) > 1 else ""
        self.echo(
            f"[{self.done}/{self.total}] {'ok    ' if ok else 'FAILED'} {run.run_id} "
            f"({status['seconds']:.0f} s{retried}){tail}"
        )

    def state(self, pending: list[Run], token: str, free: str) -> None:
        running = sum(read_status(r.run_dir) is None and _attempts(r.run_dir, token) > 0 for r in pending)
        self.echo(
            f"[runs] {len(pending) - running} pending, {running} running, {self.done - self.failed} done, "
            f"{self.failed} failed{'; ' + free if free else ''}"
        )


def run_grid(
    runs: list[Run],
    threads: int,
    jobs: int,
    retry_failed: bool = True,
    timeout: float | None = None,
    echo: Callable[[str], None] = print,
    executor: Executor | None = None,
    resources: Resources | None = None,
) -> tuple[int, float]:
    """Run every run that needs it, ``jobs`` at a time here, or as tasks of ``executor`` (each holding
    ``resources``); returns how many ran and the wall seconds spent. A run stopped from outside
    (:func:`interruption`) is submitted again, at most ``executor.retries`` times."""
    todo = [r for r in runs if needs_run(r, retry_failed)]
    progress = Progress(len(runs), len(runs) - len(todo), echo)
    pool = executor or LocalExecutor(jobs)
    where = f"{jobs} at a time" if executor is None else f"as {pool.kind}"
    echo(
        f"{len(runs)} runs: {len(runs) - len(todo)} already finished (skipped), {len(todo)} to run, "
        f"{where} with {threads} thread(s) each"
    )
    start, token, resources = time.monotonic(), uuid.uuid4().hex, resources or Resources(cpus=threads)
    pending = {pool.submit(resources, run_one, r, threads, timeout, token): r for r in todo}
    requeued = dict.fromkeys((r.run_dir for r in todo), 0)
    try:
        while pending:
            for handle in pool.wait(pending, pool.progress_every):
                run = pending.pop(handle)
                try:
                    status = pool.result(handle)
                except WorkerLost as err:  # its worker, node or job died
                    status = _record(run, f"lost: {err}", 0, _attempts(run.run_dir, token))
                except Exception as err:  # run_one raised in the task: the run's own error
                    status = _record(run, f"error: {type(err).__name__}: {err}", 0,
                                     _attempts(run.run_dir, token))
                why = interruption(status["returncode"])
                if why is not None and requeued[run.run_dir] < pool.retries:
                    requeued[run.run_dir] += 1
                    echo(f"requeued {run.run_id}: {why} at attempt {status['attempt']}")
                    pending[pool.submit(resources, run_one, run, threads, timeout, token)] = run
                    continue
                progress.finished(run, status)
            if pool.progress_every is not None:
                progress.state(list(pending.values()), token, pool.free())
    except BaseException:  # Ctrl-C: local children get it too; start nothing more
        pool.close(pending)
        raise
    if executor is None:
        pool.close()
    return len(todo), time.monotonic() - start
