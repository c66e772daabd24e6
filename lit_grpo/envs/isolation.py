"""Tools run in worker processes with a hard wall-clock limit, a memory limit and none of the trainer's state.

A call still running ``timeout_s`` after its worker took it is stopped by killing that worker (``SIGKILL``),
so code that never returns to Python (a C loop holding the GIL, a huge ``pow``) is stopped as surely as a
sleep; the other workers and their calls go on, and the next call that needs a worker starts a fresh one. A
worker limits its own address space (``RLIMIT_AS``) to what it holds once its tools are loaded plus
``memory_mb``, so a tool that allocates past it gets a ``MemoryError`` (an error observation), not the
machine's memory. A tool that raises anything, ``SystemExit`` and ``KeyboardInterrupt`` included, answers with
the error; one that ends its process (``os._exit``, a crash in C) is answered with how the worker ended.

Workers start with ``forkserver`` (each forks from a small server process that imported the tools' modules
once; it never forks the trainer, whose threads make ``fork`` unsafe) or ``spawn``; they receive the tools
pickled, so a worker sees the tools' modules as imported, never the trainer's objects (its model, optimizer,
data). :class:`WorkerPool` is thread-safe: up to ``workers`` calls run at once, each waited on in the caller's
thread.
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import pickle
import resource
import signal
import sys
import threading
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Literal

from lit_grpo.checks import require

StartMethod = Literal["forkserver", "spawn"]
#: Seconds a new worker may take to load its tools before that is an error (imports, not tool time).
STARTUP_TIMEOUT_S = 300.0
#: Types a tool's result may have to travel back (anything else is answered with its type name).
RESULT_TYPES = (str, int, float)


class ToolTimeout(Exception):
    """A call ran past its wall-clock limit; its worker was killed."""


class WorkerDied(Exception):
    """The worker process ended during a call (``os._exit``, a signal, a crash in C code)."""


class _NotTaken(Exception):
    """The worker was dead before it took the call."""


class WorkerStartError(RuntimeError):
    """A worker could not load the tools (the message names the reason and the fix)."""


def check_picklable(tools: dict[str, Callable[..., Any]]) -> bytes:
    """The tools pickled for the workers; a tool that cannot be is an error naming it and the fix."""
    main = sys.modules.get("__main__")
    for name, tool in tools.items():
        interactive = _module_of(tool) == "__main__" and not getattr(main, "__file__", None)
        require(
            not interactive,
            f"tool {name!r} is defined in an interactive session (a notebook or a REPL), which a worker "
            "process cannot import; define it in a module file, or set isolation: none to run it in the "
            "trainer's process",
        )
        try:
            pickle.dumps(tool)
        except Exception as err:
            raise ValueError(
                f"tool {name!r} cannot be sent to a worker process ({type(err).__name__}: {err}); define it "
                "at module level (not inside a function, not a lambda), or set isolation: none to run it in "
                "the trainer's process"
            ) from None
    return pickle.dumps(tools)


class WorkerPool:
    """Worker processes that run the tools of one environment, started on demand.

    Args:
        tools: Tool name -> callable (picklable: module-level functions, bound methods of picklable objects).
        workers: Most worker processes (and calls running at once).
        memory_mb: Address space a worker may add to what it holds after loading its tools (null: no limit).
        start_method: ``forkserver`` or ``spawn`` (never ``fork``).
    """

    def __init__(self, tools: dict[str, Callable[..., Any]], workers: int = 4, memory_mb: int | None = 1024,
                 start_method: StartMethod = "forkserver") -> None:
        require(workers >= 1, f"workers={workers} must be >= 1")
        require(memory_mb is None or memory_mb >= 1,
                f"memory_mb={memory_mb} must be >= 1, or null for no limit")
        require(start_method in ("forkserver", "spawn"),
                f"start_method={start_method!r}; use 'forkserver' or 'spawn' (fork is unsafe in a "
                "process with threads)")
        self.blob = check_picklable(tools)
        self.modules = sorted({m for m in (_module_of(t) for t in tools.values()) if m and m != "__main__"})
        self.workers, self.memory_mb, self.start_method = workers, memory_mb, start_method
        self.started = 0  # workers started so far (a killed one is replaced by a new start)
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(workers)
        self._finalizer = weakref.finalize(self, _kill_all, self._live)

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> tuple[str, Any]:
        """Runs tool ``name`` in a worker: ``("ok", value)``, ``("type", type name)`` for a result of another
        type than text or a number, or ``("raised", "Kind: message")``. Raises :class:`ToolTimeout` past
        ``timeout_s`` and :class:`WorkerDied` when the worker ended during the call; both leave the pool
        usable. A worker found dead before it took the call (killed from outside while idle) is replaced, and
        the call sent again."""
        with self._slots:
            for attempt in range(2):
                worker = self._take()
                try:
                    outcome = worker.run((name, arguments), timeout_s)
                except _NotTaken:
                    self._drop(worker)
                    if attempt == 0:
                        continue
                    raise WorkerDied("its worker process ended before it took the call, twice") from None
                except BaseException:
                    self._drop(worker)
                    raise
                with self._lock:
                    self._idle.append(worker)
                return outcome
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Stops every worker (a later call starts new ones)."""
        with self._lock:
            _kill_all(self._live)
            self._idle.clear()

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                self._live.discard(worker)  # died while idle (killed from outside): start another
        worker = _Worker.start(self)
        with self._lock:
            self._live.add(worker)
            self.started += 1
        return worker

    def _drop(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._live.discard(worker)


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(self, process, conn: Connection) -> None:
        self.process, self.conn = process, conn

    @classmethod
    def start(cls, pool: WorkerPool) -> _Worker:
        ctx = multiprocessing.get_context(pool.start_method)
        if pool.start_method == "forkserver":  # takes effect if the server is not running yet
            ctx.set_forkserver_preload([__name__, *pool.modules])
        parent, child = ctx.Pipe()
        memory = None if pool.memory_mb is None else pool.memory_mb * 2**20
        process = ctx.Process(target=_serve, args=(child, pool.blob, memory), name="lit-grpo-tool",
                              daemon=True)
        process.start()
        child.close()
        worker = cls(process, parent)
        try:
            if not parent.poll(STARTUP_TIMEOUT_S):
                raise WorkerStartError(f"a tool worker did not load its tools within {STARTUP_TIMEOUT_S:g} s")
            kind, detail = parent.recv()
        except (EOFError, OSError):
            worker.kill()
            raise WorkerStartError(f"a tool worker ended while loading its tools (exit code "
                                   f"{process.exitcode})") from None
        except BaseException:
            worker.kill()
            raise
        if kind != "ready":
            worker.kill()
            raise WorkerStartError(f"a tool worker could not load the tools: {detail}; a worker imports each "
                                   "tool's module anew: define the tools in an importable module, or "
                                   "set isolation: none")
        return worker

    def run(self, request: tuple[str, dict], timeout_s: float) -> tuple[str, Any]:
        try:
            self.conn.send(request)
            self.conn.recv()  # the worker took the call (it answers at once; only a dead worker does not)
        except (EOFError, OSError):
            raise _NotTaken from None
        try:
            if not self.conn.poll(timeout_s):
                raise ToolTimeout(f"ran past its time limit of {timeout_s:g} s; its worker process "
                                  "was killed")
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(timeout=5)
            raise WorkerDied(f"its worker process ended ({_ending(self.process.exitcode)})") from None

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


def _kill_all(workers: set[_Worker]) -> None:
    for worker in list(workers):
        worker.kill()
    workers.clear()


def _ending(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _module_of(tool: Callable[..., Any]) -> str | None:
    owner = getattr(tool, "__self__", None)
    return type(owner).__module__ if owner is not None else getattr(tool, "__module__", None)


def _serve(conn: Connection, blob: bytes, memory: int | None) -> None:
    """A worker's life: load the tools, limit the address space, answer calls until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle; it kills the workers
    try:
        tools = pickle.loads(blob)
        if memory is not None:
            limit = _address_space() + memory
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except BaseException as err:  # noqa: BLE001 - reported to the parent, which names the problem
        conn.send(("error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            name, arguments = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(("taken", None))
        outcome = _answer(tools[name], arguments, memory)
        try:
            conn.send(outcome)
        except Exception as err:  # noqa: BLE001 - e.g. a str subclass that does not pickle
            conn.send(("raised", f"its result could not be sent back ({type(err).__name__}: {err})"))


def _answer(tool: Callable[..., Any], arguments: dict[str, Any], memory: int | None) -> tuple[str, Any]:
    try:
        value = tool(**arguments)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
    except MemoryError as err:
        limit = "" if memory is None else f" (memory_mb={memory // 2**20} beyond what loading the tools took)"
        return "raised", f"MemoryError: ran out of memory{limit}{': ' + str(err) if str(err) else ''}"
    except BaseException as err:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too: the tool's failure
        return "raised", f"{type(err).__name__}: {err}"
    if isinstance(value, bool) or not isinstance(value, RESULT_TYPES):
        return "type", type(value).__name__
    return "ok", value


async def _awaited(value: Any) -> Any:
    return await value


def _address_space() -> int:
    """Bytes of address space this process holds now (``VmSize``)."""
    if sys.platform.startswith("linux"):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)

