"""One ``lit-grpo`` child process of a grid: how it is started (so that it dies with the process that started
it), the children running now in this process, and the ``status.json`` a finished run leaves
(:mod:`lit_grpo.lab.runner` writes it; :mod:`lit_grpo.lab.collect` and the executors read it)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

STATUS_FILE = "status.json"
#: Starts ``python -m lit_grpo ARGS`` so that Linux kills it when the process that started it dies
#: (``PR_SET_PDEATHSIG``, kept across exec): a run whose Ray worker or Slurm job dies leaves no orphan writing
#: the run directory while the run is tried again. argv: the parent's pid, then the lit-grpo arguments.
_LAUNCH = """import ctypes, os, signal, sys
try:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
except AttributeError:  # not Linux
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit("the process that started this run has died")
os.execv(sys.executable, [sys.executable, "-m", "lit_grpo", *sys.argv[2:]])
"""


def read_status(run_dir: Path) -> dict | None:
    path = Path(run_dir) / STATUS_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


#: The ``lit-grpo`` children running now in this process (a Slurm job's task passes signals on to them).
CHILDREN: set[subprocess.Popen] = set()
#: Where :func:`call` writes the command it runs, for the other tasks of a Slurm job of several tasks
#: (:mod:`lit_grpo.lab.executors` sets it in the job's first task); None: nowhere.
announce_to: Path | None = None


def _env(threads: int) -> dict[str, str]:
    threads_env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    return {**os.environ, **threads_env, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def call(args: tuple[str, ...], log: Path | None, threads: int, timeout: float | None,
          append: bool = False) -> tuple[int | str, float]:
    """Run ``lit-grpo <args>`` in a child process, output to ``log`` (after what it holds, with ``append``;
    None: this process's output); (return code or "timeout", seconds)."""
    if announce_to is not None:  # written whole (renamed into place): the other tasks start the same command
        announce_to.with_suffix(".tmp").write_text(json.dumps({"args": list(args), "threads": threads,
                                                               "timeout": timeout}))
        announce_to.with_suffix(".tmp").rename(announce_to)
    start = time.monotonic()
    output = contextlib.nullcontext() if log is None else open(log, "a" if append else "w")
    with output as out:
        command = [sys.executable, "-c", _LAUNCH, str(os.getpid()), *args]
        with subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=_env(threads)) as child:
            CHILDREN.add(child)
            try:
                rc: int | str = child.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                rc = "timeout"
            except BaseException:  # as subprocess.run: the child does not outlive an error here
                child.kill()
                raise
            finally:
                CHILDREN.discard(child)
    return rc, time.monotonic() - start
