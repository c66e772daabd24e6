"""The pieces of an asynchronous rollout producer besides the pipeline (:mod:`lit_grpo.rollout.asynchronous`):
its thread, the limit on waiting for it, what a dead or stuck producer is said to be, and the random states a
producer process borrows from the trainer."""

from __future__ import annotations

import queue
import random
import signal
import threading
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import numpy as np
import torch

#: The automatic limit on waiting for the producer (``producer_timeout_s: null``): this many times its slowest
#: job so far in the fit, and never less than :data:`AUTOMATIC_FLOOR_S` (which also covers a process's start
#: and its first batch, before anything is measured).
AUTOMATIC_FACTOR = 10.0
AUTOMATIC_FLOOR_S = 300.0


def stall_limit(timeout_s: float | None, slowest_s: float, starting: bool = False) -> float:
    """Seconds the producer may go without finishing a job while it has one: ``timeout_s`` when given, else
    :data:`AUTOMATIC_FACTOR` times ``slowest_s`` (its slowest job so far), at least
    :data:`AUTOMATIC_FLOOR_S`. ``starting``: a process that has not finished its first job yet, whose start
    (spawn, imports, its copy of the policy) counts toward that job: at least :data:`AUTOMATIC_FLOOR_S`."""
    limit = max(AUTOMATIC_FLOOR_S, AUTOMATIC_FACTOR * slowest_s) if timeout_s is None else timeout_s
    return max(limit, AUTOMATIC_FLOOR_S) if starting else limit


class ProducerError(RuntimeError):
    """The rollout producer failed a run: it died, stalled past its limit, or raised on a batch no step
    trains."""


class ProducerThread(Executor):
    """One daemon thread that runs the jobs handed to it in order (an executor of one worker). Daemon: a
    producer stuck in a job (a tool call that never returns) does not keep the process from exiting once the
    run stopped, as a worker of ``ThreadPoolExecutor``, which the interpreter joins at exit, would."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args, kwargs = job
            if not future.set_running_or_notify_cancel():  # cancelled before it started
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as err:  # handed to whoever waits for the job
                future.set_exception(err)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        self._jobs.put(None)
        if wait:
            self._thread.join()

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the thread to end (after :meth:`shutdown`); whether it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


#: ``/proc/<pid>/stat`` state letters, as a sentence.
_STATES = {"R": "running", "S": "sleeping, waiting for something",
           "D": "in uninterruptible sleep, waiting for a disk, a network file system or a device",
           "T": "stopped by a signal, SIGSTOP or SIGTSTP", "t": "stopped by a debugger",
           "Z": "a zombie, ended and not yet reaped"}


def process_state(pid: int) -> str | None:
    """What Linux says process ``pid`` is doing (``/proc/<pid>/stat``); None where that cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    letter = stat[stat.rindex(")") + 2 :].split(" ", 1)[0]  # after the command name, which may hold spaces
    return _STATES.get(letter, f"in state {letter!r}")


_CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE}


def exit_description(code: int | None) -> tuple[str, str]:
    """How a producer process with exit code ``code`` (``multiprocessing``'s: minus the signal that killed it)
    ended, and what to do about it."""
    if code is None:
        return "ended (its exit status is unknown)", "Its stderr above may say why."
    if code >= 0:
        return f"exited with status {code}", "Its stderr above says why."
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"was killed by signal {-code}", "Find what sent it."
    if sig == signal.SIGKILL:
        return "killed by SIGKILL", (
            "SIGKILL is most often the kernel's out-of-memory killer (dmesg, or the scheduler's report of "
            "the job, says so): the producer holds a copy of the policy and max_staleness + 1 weight "
            "buffers, so give the job more memory, lower max_staleness, or use producer: thread, which "
            "shares the trainer's process.")
    if sig in _CRASHES:
        return f"killed by {sig.name}", (
            "That is a crash in native code (torch, a device driver, a tokenizer): the producer's stderr "
            "above says where; producer: thread runs the same code in the trainer's process, where a "
            "debugger can follow it.")
    return f"killed by {sig.name}", (
        f"Find what sent {sig.name} (the producer ignores SIGINT, SIGTERM, SIGUSR1 and SIGUSR2, so that a "
        "scheduler's signal to the job stops the trainer, which stops the producer).")


def random_states(cuda: bool) -> dict[str, Any]:
    """This process's global random states: torch's CPU generator, numpy's and ``random``'s, and with ``cuda``
    those of the CUDA devices (when CUDA is in use)."""
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_random_states(states: dict[str, Any]) -> None:
    """Restore what :func:`random_states` returned."""
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def stop_handler() -> Any | None:
    """The callback whose method handles the stop signals of this fit, when it keeps a ``requested`` flag:
    ``lit_grpo.checkpoint.SaveOnInterrupt``, which ``lit-grpo fit`` adds (Ctrl-C, SIGTERM, SIGUSR1,
    SIGUSR2). Its ``requested`` says a stop was asked for; set (with ``received``, the reason) it writes a
    checkpoint after the step and stops the fit, and its ``saved_path`` then names the checkpoint. None
    without one."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        owner = getattr(signal.getsignal(signum), "__self__", None)
        if owner is not None and hasattr(owner, "requested") and hasattr(owner, "saved_path"):
            return owner
    return None
