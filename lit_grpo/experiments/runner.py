"""Running the grid: prepare steps once, then each run as its own ``lit-grpo fit`` process.

A run writes ``run.log`` (its output), ``command.txt`` and, when it ends, ``status.json``
(``{"status": "done" | "failed", "returncode", "seconds", "args"}``). A run whose ``status.json`` says
done with the same arguments is skipped next time; a failed, unfinished or changed run starts again
from an empty directory. A crash stays inside its process: it is recorded and the others go on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lit_grpo.experiments.grid import Run, prepare_args, prepare_output, shell_command, substitute
from lit_grpo.experiments.spec import Experiment, Prepare

STATUS_FILE = "status.json"
PREPARED_FILE = ".prepared.json"


def default_jobs(threads_per_run: int) -> int:
    """Parallel runs that fit the machine: CPU cores // threads per run (at least 1)."""
    return max(1, (os.cpu_count() or 1) // threads_per_run)


def read_status(run_dir: Path) -> dict | None:
    path = Path(run_dir) / STATUS_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def needs_run(run: Run, retry_failed: bool = True) -> bool:
    """False when the run finished with these arguments (done, or failed and not retried)."""
    status = read_status(run.run_dir)
    if status is None or status.get("args") != list(run.args):
        return True
    return status.get("status") != "done" and retry_failed


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _call(args: tuple[str, ...], log: Path, threads: int, timeout: float | None) -> tuple[int | str, float]:
    """Run ``lit-grpo <args>`` in a child process, output to ``log``; (return code or "timeout", seconds)."""
    start = time.monotonic()
    with open(log, "w") as out:
        try:
            rc: int | str = subprocess.run(
                [sys.executable, "-m", "lit_grpo", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_env(threads),
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return rc, time.monotonic() - start


def run_one(run: Run, threads: int, timeout: float | None = None) -> dict:
    """Run one grid cell from an empty directory and record its status."""
    if run.run_dir.exists():
        shutil.rmtree(run.run_dir)
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "command.txt").write_text(shell_command(run.args, threads) + "\n")
    rc, seconds = _call(run.args, run.log_path, threads, timeout)
    status = {
        "status": "done" if rc == 0 else "failed",
        "returncode": rc,
        "seconds": round(seconds, 2),
        "args": list(run.args),
        "log": str(run.log_path),
    }
    (run.run_dir / STATUS_FILE).write_text(json.dumps(status, indent=1))
    return status


def run_prepare(
    exp: Experiment,
    root: str | Path = "runs/experiments",
    threads: int = 1,
    echo: Callable[[str], None] = print,
) -> dict[str, Path]:
    """Run each prepare step whose output is not cached yet; their output directories by name."""
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
        shutil.rmtree(output, ignore_errors=True)
        shutil.rmtree(f"{output}-logs", ignore_errors=True)  # the requirement reads this step's log alone
        log = Path(f"{output}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        echo(f"prepare {step.name}: {shell_command(args, threads)}")
        rc, seconds = _call(args, log, threads, None)
        if rc != 0 or not output.is_dir():
            raise RuntimeError(f"prepare step {step.name!r} failed (exit {rc}, no {output}); see {log}")
        reached = _check_requirement(step, exp.quick, output, echo)
        marker.write_text(json.dumps({"args": list(args), "seconds": round(seconds, 2), **reached}))
        echo(f"prepare {step.name}: done in {seconds:.0f} s -> {output}")
    return outputs


def _check_requirement(step: Prepare, quick: bool, output: Path, echo: Callable[[str], None]) -> dict:
    """The value a prepare step's requirement reached (``{}`` without one, or in quick mode, whose shortened
    step is not meant to reach it); a RuntimeError when it misses, so that no run starts from an output
    the experiment does not assume. The output stays on disk, unmarked: the next call runs the step again."""
    from lit_grpo.experiments.collect import read_scalars, reduce_series  # collect imports this module

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
            f"prepare step {step.name!r} did not meet its requirement {want}: {step.require.metric.name} {got} "
            f"(log: {output}-logs, output kept unmarked in {output}). The experiment's runs assume it; change "
            f"the step (more steps, another lr) or the requirement, then run again"
        )
    echo(f"prepare {step.name}: requirement {want} met ({value:.4g})")
    return {"required": want, "reached": value}


def prepared_outputs(exp: Experiment, root: str | Path = "runs/experiments") -> dict[str, Path]:
    """The output directories of the prepare steps (whether or not they exist yet)."""
    return {step.name: prepare_output(step, exp.quick, root) for step in exp.prepare}


class Progress:
    """One line per finished run: ``[done/total] ok|FAILED run-id (seconds)``, thread-safe."""

    def __init__(self, total: int, done: int, echo: Callable[[str], None] = print) -> None:
        self.total, self.done, self.echo, self.lock = total, done, echo, threading.Lock()

    def finished(self, run: Run, status: dict) -> None:
        with self.lock:
            self.done += 1
            ok = status["status"] == "done"
            tail = "" if ok else f"  exit {status['returncode']}, log: {status['log']}"
            self.echo(
                f"[{self.done}/{self.total}] {'ok    ' if ok else 'FAILED'} {run.run_id} "
                f"({status['seconds']:.0f} s){tail}"
            )


def run_grid(
    runs: list[Run],
    threads: int,
    jobs: int,
    retry_failed: bool = True,
    timeout: float | None = None,
    echo: Callable[[str], None] = print,
) -> tuple[int, float]:
    """Run every run that needs it, ``jobs`` at a time; returns how many ran and the wall seconds spent."""
    todo = [r for r in runs if needs_run(r, retry_failed)]
    progress = Progress(len(runs), len(runs) - len(todo), echo)
    echo(
        f"{len(runs)} runs: {len(runs) - len(todo)} already finished (skipped), {len(todo)} to run, "
        f"{jobs} at a time with {threads} thread(s) each"
    )
    start = time.monotonic()

    def work(run: Run) -> None:
        progress.finished(run, run_one(run, threads, timeout))

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        for future in [pool.submit(work, r) for r in todo]:
            future.result()
    except BaseException:  # Ctrl-C: the running children get it too; start nothing more
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return len(todo), time.monotonic() - start
