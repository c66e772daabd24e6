"""Scoring items in worker processes with a wall-clock limit per item.

A Python function cannot be stopped from the outside inside a thread, so a scorer that may hang (a
sympy comparison that never ends, arbitrary user code) runs in a process pool. Each worker runs an
item in its main thread, so SIGALRM-based limits inside the scorer (math-verify's) work there too;
on top of that, an item still running ``timeout_s`` after it was handed to a free worker is a timeout:
the pool is killed and recreated and the other items go on. A worker that dies takes its items with
it; they are retried one at a time, and an item that kills a worker on its own is an error.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Literal

from math_verify.errors import TimeoutException

from lit_grpo.checks import require
from lit_grpo.rewards.base import Unscorable

StartMethod = Literal["forkserver", "spawn"]
_STARTUP_S = 600
#: One item's result: ``(True, value)``, or ``(False, exception)`` for the scorer's failure.
Outcome = tuple[bool, Any]


def run_item(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Outcome:
    """Runs one item in a worker; failures come back as picklable exceptions of the same kind."""
    try:
        return True, fn(*args, **kwargs)
    except Unscorable as exc:
        return False, exc
    except (TimeoutError, TimeoutException) as exc:  # math-verify's derives from BaseException
        return False, TimeoutError(str(exc) or "timed out")
    except Exception as exc:
        return False, RuntimeError(f"{type(exc).__name__} in a scoring worker: {exc}")


class ScoringPool:
    """A lazily started process pool scoring items with a per-item wall-clock limit.

    Args:
        workers: Worker processes.
        timeout_s: Wall-clock seconds an item may run once a worker has it.
        start_method: ``forkserver`` (workers fork from a server that imported the scorer's module
            once) or ``spawn``. Never ``fork``: forking a process that runs threads is unsafe.
    """

    def __init__(self, workers: int, timeout_s: float, start_method: StartMethod = "forkserver") -> None:
        require(workers >= 1, f"ScoringPool: workers={workers} must be >= 1")
        require(timeout_s > 0, f"ScoringPool: timeout_s={timeout_s} must be > 0")
        require(start_method in ("forkserver", "spawn"),
                f"ScoringPool: start_method={start_method!r}; use 'forkserver' or 'spawn'")
        self.workers = workers
        self.timeout_s = timeout_s
        self.start_method = start_method
        self.restarts = 0  # pools killed and recreated after a hang or a dead worker
        self._executor: ProcessPoolExecutor | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_executor": None}  # a reward holding a pool pickles without it

    def map(self, fn: Callable[..., Any], items: Sequence[tuple[tuple, dict]]) -> list[Outcome]:
        """``fn(*args, **kwargs)`` for each ``(args, kwargs)`` of ``items``, in order of ``items``.

        A hung item gives ``(False, TimeoutError)``; an item that kills its worker on its own gives
        ``(False, RuntimeError)``; ``fn`` must be picklable (a module-level function or a bound
        method of a picklable object). Up to ``2 × workers`` items are in flight, so workers do not
        wait on the round trip; an item's clock starts when a worker is free to take it. Interrupted
        (Ctrl-C, or the reward call's time limit: a ``BaseException`` in this thread), the workers are
        killed before it propagates, so no item keeps a worker busy after the call.
        """
        try:
            return self._map(fn, items)
        except BaseException:
            self._kill()
            raise

    def _map(self, fn: Callable[..., Any], items: Sequence[tuple[tuple, dict]]) -> list[Outcome]:
        results: list[Outcome | None] = [None] * len(items)
        todo, flight = deque(range(len(items))), _Flight()
        isolate = False  # after a worker died: one item at a time until the culprit is found
        while todo or flight.items:
            executor = self._pool(fn)
            while todo and len(flight.items) < (1 if isolate else 2 * self.workers):
                i = todo.popleft()
                args, kwargs = items[i]
                flight.add(executor.submit(run_item, fn, args, kwargs), i)
            flight.start_clocks(1 if isolate else self.workers)
            timeout = max(0.0, min(flight.started.values()) + self.timeout_s - time.monotonic())
            done, _ = wait(flight.items, timeout=timeout, return_when=FIRST_COMPLETED)
            if any(_died(f) for f in done):
                isolate = self._died(flight, done, results, todo, isolate)
                continue
            for future in done:
                results[flight.pop(future)] = future.result()
            self._expire(flight, results, todo)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Stops the workers (a later :meth:`map` starts new ones)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def _pool(self, fn: Callable[..., Any]) -> ProcessPoolExecutor:
        if self._executor is None:
            ctx = multiprocessing.get_context(self.start_method)
            if self.start_method == "forkserver":
                owner = getattr(fn, "__self__", fn)
                module = getattr(owner, "__module__", None) or type(owner).__module__
                ctx.set_forkserver_preload(list(dict.fromkeys([__name__, module])))
            executor = ProcessPoolExecutor(self.workers, mp_context=ctx)
            try:  # start every worker before the clock runs: starting (imports) is not scoring time
                started = [executor.submit(_ready) for _ in range(self.workers)]
                if wait(started, timeout=_STARTUP_S).not_done:
                    raise RuntimeError(f"the scoring workers did not start within {_STARTUP_S} s")
            except BaseException:  # also interrupted while starting: no worker is left behind
                _stop(executor)
                raise
            self._executor = executor
        return self._executor

    def _expire(self, flight: _Flight, results: list, todo: deque) -> None:
        """Items past their wall-clock limit are timeouts; the pool is killed and the rest requeued."""
        now = time.monotonic()
        late = [f for f, start in flight.started.items() if now - start >= self.timeout_s and not f.done()]
        if not late:
            return
        for future in late:
            results[flight.pop(future)] = (
                False, TimeoutError(f"scoring ran past {self.timeout_s:g} s (wall clock) in a worker"),
            )  # fmt: skip
        todo.extendleft(sorted(flight.clear(), reverse=True))
        self._kill()

    def _died(self, flight: _Flight, done: set, results: list, todo: deque, isolate: bool) -> bool:
        """A worker died and took the unfinished items with it. Alone, the item is the culprit (an
        error); otherwise they are retried one at a time."""
        for future in done:
            if not _died(future):
                results[flight.pop(future)] = future.result()
        lost = sorted(flight.clear())
        self._kill()
        if len(lost) == 1:
            results[lost[0]] = (False, RuntimeError("the scoring worker died while scoring this item"))
            return isolate
        todo.extendleft(reversed(lost))
        return True

    def _kill(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        self.restarts += 1
        _stop(executor)


class PooledScorer:
    """What a reward that scores in worker processes shares: with ``workers > 0`` its :attr:`pool` starts on
    first use with :meth:`pool_timeout_s` seconds an item, never travels to the workers with the reward's
    settings, and :meth:`close` stops it. The reward sets ``workers`` and ``start_method`` (checked by
    :meth:`check_pool`)."""

    workers: int = 0
    start_method: StartMethod = "forkserver"
    timeout_s: float
    _pool: ScoringPool | None = None

    def check_pool(self, workers: int, start_method: StartMethod) -> None:
        require(
            isinstance(workers, int) and workers >= 0,
            f"{type(self).__name__}: workers={workers!r} must be an integer >= 0 (0: "
            "score in the calling process)",
        )
        require(
            start_method in ("forkserver", "spawn"),
            f"{type(self).__name__}: start_method={start_method!r} is not supported; "
            "use 'forkserver' or 'spawn'",
        )
        self.workers, self.start_method = workers, start_method

    def pool_timeout_s(self) -> float:
        """Wall-clock seconds an item may run in a worker (here: ``timeout_s``)."""
        return self.timeout_s

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pool": None}  # workers get the settings, never the pool

    @property
    def pool(self) -> ScoringPool | None:
        """The worker pool (None with ``workers=0``), created on first use."""
        if self.workers > 0 and self._pool is None:
            self._pool = ScoringPool(self.workers, self.pool_timeout_s(), self.start_method)
        return self._pool

    def close(self) -> None:
        """Stops the worker processes, if any."""
        if self._pool is not None:
            self._pool.close()


class _Flight:
    """Submitted items: ``items`` future -> item index; ``started`` future -> start time of those a
    worker can be working on; ``waiting`` the rest, in submission order (the order workers take them)."""

    def __init__(self) -> None:
        self.items: dict[Future, int] = {}
        self.started: dict[Future, float] = {}
        self.waiting: deque[Future] = deque()

    def add(self, future: Future, index: int) -> None:
        self.items[future] = index
        self.waiting.append(future)

    def start_clocks(self, running: int) -> None:
        """Starts the clocks of the next waiting items while fewer than ``running`` are started."""
        while self.waiting and len(self.started) < running:
            self.started[self.waiting.popleft()] = time.monotonic()

    def pop(self, future: Future) -> int:
        self.started.pop(future, None)
        if future in self.waiting:
            self.waiting.remove(future)
        return self.items.pop(future)

    def clear(self) -> list[int]:
        """Forgets every item in flight; returns their indices."""
        lost = list(self.items.values())
        self.items.clear()
        self.started.clear()
        self.waiting.clear()
        return lost


def _stop(executor: ProcessPoolExecutor) -> None:
    """Kills the executor's worker processes and waits for them (a few seconds at most)."""
    processes = list((getattr(executor, "_processes", None) or {}).values())  # no public API before 3.14
    for process in processes:
        process.kill()
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout=5)


def _ready() -> bool:
    return True


def _died(future: Future) -> bool:
    return future.exception() is not None and isinstance(future.exception(), BrokenProcessPool)
