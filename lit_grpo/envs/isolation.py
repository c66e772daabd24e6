"""Tools run in worker processes with a hard wall-clock limit, a memory limit and none of the trainer's state.

A call still running ``timeout_s`` after its worker took it is stopped by killing that worker's process
group (``SIGKILL``), so code that never returns to Python (a C loop holding the GIL, a huge ``pow``) is
stopped as surely as a sleep, and so are the processes the tool started; the other workers and their calls
go on, and the next call that needs a worker starts a fresh one. A worker limits its own address space
(``RLIMIT_AS``) to what it holds once its tools are loaded plus ``memory_mb``, so a tool that allocates past
it gets a ``MemoryError`` (an error observation), not the machine's memory. A tool that raises anything,
``SystemExit`` and ``KeyboardInterrupt`` included, answers with the error; one that ends its process
(``os._exit``, a crash in C) is answered with how the worker ended.

Every worker is a session and process group of its own, killed as a group at the time limit, on ``close()``
and at the trainer's exit. It sees an allow-listed environment (:data:`INHERITED_ENV` plus ``pass_env``),
restored after each call; each call starts in an empty temporary working directory (the worker's own,
emptied after every call that left something in it, removed with the worker); its stdout and stderr (its
children's included) go to a log capped at ``log_bytes``. Workers start with
``forkserver`` (forked from a server process of lit-grpo's own, started once per trainer process with the
allow-listed environment, which imported the tools' modules once; the trainer itself, whose threads make
``fork`` unsafe, is never forked) or ``spawn`` (a fresh interpreter each). Neither runs the trainer's main
script again: the tools are imported by reference, and only a tool defined in the main script makes a worker
import that script, which then needs an ``if __name__ == "__main__":`` guard (checked at construction). A
worker receives the tools pickled, so it sees the tools' modules as imported, never the trainer's objects
(its model, optimizer, data). :class:`WorkerPool` is thread-safe: up to ``workers`` calls run at once, each
waited on in the caller's thread.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import fnmatch
import importlib
import importlib.util
import inspect
import io
import itertools
import logging
import multiprocessing
import os
import pickle
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

from lit_grpo.checks import require, require_folder

logger = logging.getLogger(__name__)

StartMethod = Literal["forkserver", "spawn"]
#: Seconds a new worker may take to load its tools before that is an error (imports, not tool time).
STARTUP_TIMEOUT_S = 300.0
#: Types a tool's result may have to travel back (anything else is answered with its type name).
RESULT_TYPES = (str, int, float)
#: Environment variables a worker inherits from the trainer (``fnmatch`` patterns); ``pass_env`` adds more.
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR", "PYTHONPATH")
#: Where a worker's output log stops (``% log_bytes``): the rest of the tools' output is dropped.
CUT_MARK = b"\n[lit-grpo: the tools' output is cut here, at log_bytes=%d; the rest is dropped]\n"
#: What a new interpreter runs (a worker for ``spawn``, the fork server): the trainer's ``sys.path`` comes
#: first on the channel, so lit-grpo and the tools import as they do in the trainer, never its main script.
_BOOT = ("import sys; from multiprocessing.connection import Connection; "
         "conn = Connection(int(sys.argv[2])); sys.path[:] = conn.recv(); "
         "from lit_grpo.envs.isolation import child_main; child_main(sys.argv[1], conn)")
_LOGS = itertools.count()


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
    return _pickled(tools)[0]


def _pickled(tools: dict[str, Callable[..., Any]]) -> tuple[bytes, tuple[str, str] | None]:
    """The pickled tools, and how a worker imports the trainer's main script where they refer to it
    (``("name", module)`` when it ran as ``python -m module``, else ``("path", file)``; None: they do not)."""
    uses_main = False
    for name, tool in tools.items():
        finder = _MainFinder(io.BytesIO())
        try:
            finder.dump(tool)
        except Exception as err:
            _check_main(name, finder.main)  # a tool of a notebook fails to pickle: that is the reason to name
            raise ValueError(
                f"tool {name!r} cannot be sent to a worker process ({type(err).__name__}: {err}); define "
                "it at module level (not inside a function, not a lambda), or set isolation: none to run it "
                "in the trainer's process"
            ) from None
        _check_main(name, finder.main)
        uses_main = uses_main or finder.main
    blob = pickle.dumps(tools)
    if not uses_main:
        return blob, None
    main = sys.modules["__main__"]
    module = getattr(getattr(main, "__spec__", None), "name", None)
    return blob, ("name", module) if module else ("path", os.path.abspath(main.__file__))


def _check_main(name: str, uses_main: bool) -> None:
    """``require`` that a worker can import the trainer's main script where tool ``name`` refers to it: a
    file (not a notebook), whose work is under a main guard (a worker runs its top level)."""
    if not uses_main:
        return
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    require(
        path is not None,
        f"tool {name!r} is defined in an interactive session (a notebook or a REPL), which a worker "
        "process cannot import; define it in a module file, or set isolation: none to run it in the "
        "trainer's process",
    )
    require(
        _has_main_guard(path),
        f"tool {name!r} is defined in the script {path}, which every tool worker imports to find it, "
        "running its top level again (a second training run); put its work under "
        'if __name__ == "__main__":, or define the tools in a module the script imports',
    )


class _MainFinder(pickle.Pickler):
    """A pickler that notes whether a function, class or instance it pickles belongs to ``__main__``."""

    main = False

    def reducer_override(self, obj: Any) -> Any:
        owner = obj if isinstance(obj, type) or inspect.isroutine(obj) else type(obj)
        self.main = self.main or getattr(owner, "__module__", None) == "__main__"
        return NotImplemented


def _has_main_guard(path: str) -> bool:
    """Whether the script at ``path`` has a top-level ``if __name__ == "__main__":`` (unreadable: assumed)."""
    try:
        tree = ast.parse(Path(path).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return True
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            sides = [test.left, test.comparators[0]]
            if (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
                    and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)):
                return True
    return False


class WorkerPool:
    """Worker processes that run the tools of one environment, started on demand.

    Args:
        tools: Tool name -> callable (picklable: module-level functions, bound methods of picklable objects).
        workers: Most worker processes (and calls running at once).
        memory_mb: Address space a worker may add to what it holds after loading its tools (null: no limit).
        start_method: ``forkserver`` or ``spawn`` (never ``fork``).
        pass_env: Environment variables a worker inherits besides :data:`INHERITED_ENV` (names or ``fnmatch``
            patterns, e.g. ``HF_TOKEN``, ``AWS_*``; ``*``: all of them).
        log_path: The file the workers' stdout and stderr go to (appended; null: a new file in the system's
            temporary folder, named in an INFO log line).
        log_bytes: Most bytes of output written to the log; the rest is dropped after :data:`CUT_MARK`.
        calls_per_worker: Calls a worker answers before it is replaced by a fresh one (null: no limit; 1: no
            call sees what an earlier one left in the worker's memory).
    """

    def __init__(self, tools: dict[str, Callable[..., Any]], workers: int = 4, memory_mb: int | None = 1024,
                 start_method: StartMethod = "forkserver", pass_env: Sequence[str] = (),
                 log_path: str | os.PathLike | None = None, log_bytes: int = 2**20,
                 calls_per_worker: int | None = None) -> None:
        require(workers >= 1, f"workers={workers} must be >= 1")
        require(memory_mb is None or memory_mb >= 1,
                f"memory_mb={memory_mb} must be >= 1, or null for no limit")
        require(start_method in ("forkserver", "spawn"),
                f"start_method={start_method!r}; use 'forkserver' or 'spawn' (fork is unsafe in a "
                "process with threads)")
        check_isolation_options(pass_env, log_bytes, calls_per_worker)
        self.blob, self.main = _pickled(tools)
        self.modules = sorted({m for m in (_module_of(t) for t in tools.values()) if m and m != "__main__"})
        self.workers, self.memory_mb, self.start_method = workers, memory_mb, start_method
        self.calls_per_worker = calls_per_worker
        self.env = _environment(pass_env)
        if log_path is None:
            log_path = Path(tempfile.gettempdir(), f"lit-grpo-tools-{os.getpid()}-{next(_LOGS)}.log")
        require(not Path(log_path).is_dir(), f"log_path={str(log_path)!r} is a folder; name a file in it")
        require_folder("log_path", Path(log_path).parent)
        self.started = 0  # workers started so far (a killed one is replaced by a new start)
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(workers)
        self._log = _Log(Path(log_path), log_bytes)
        self._home = _Home()
        self._finalizer = weakref.finalize(self, _shut, self._live, self._log, self._home)

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
                worker.calls += 1
                if self.calls_per_worker is not None and worker.calls >= self.calls_per_worker:
                    self._drop(worker)
                else:
                    with self._lock:
                        self._idle.append(worker)
                return outcome
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Stops every worker and the processes its tools started (a later call starts new ones); the log
        then holds all they wrote."""
        with self._lock:
            _shut(self._live, self._log, self._home)
            self._idle.clear()

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                self._live.discard(worker)  # died while idle (killed from outside): start another
                worker.kill()
            home, output = self._home.make(), self._log.writer()
        worker = _Worker.start(self, home, output)
        with self._lock:
            self._live.add(worker)
            self.started += 1
        return worker

    def _drop(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._live.discard(worker)


def check_isolation_options(pass_env: Sequence[str], log_bytes: int, calls_per_worker: int | None) -> None:
    """``require`` for the options of what an isolated tool inherits and leaves."""
    require(isinstance(pass_env, (list, tuple)) and all(isinstance(p, str) and p for p in pass_env),
            f"pass_env={pass_env!r}: give a list of variable names or patterns, e.g. ['HF_TOKEN', 'AWS_*'] "
            "(['*']: all of the trainer's variables)")
    require(isinstance(log_bytes, int) and log_bytes >= 0, f"log_bytes={log_bytes!r} must be an integer >= 0")
    require(calls_per_worker is None or calls_per_worker >= 1,
            f"calls_per_worker={calls_per_worker} must be >= 1, or null for no limit")


def _environment(pass_env: Sequence[str] = ()) -> dict[str, str]:
    """The trainer's environment variables a worker inherits."""
    patterns = (*INHERITED_ENV, *pass_env)
    return {k: v for k, v in os.environ.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}


def _sys_path() -> list[str]:
    """The trainer's ``sys.path`` with relative entries made absolute (a worker runs in another folder)."""
    return [os.path.abspath(p) if isinstance(p, str) else p for p in sys.path]


class _Home:
    """The pool's temporary folder: the workers' working directory between calls, and the calls' below it."""

    def __init__(self) -> None:
        self.path: str | None = None

    def make(self) -> str:
        if self.path is None or not os.path.isdir(self.path):
            self.path = tempfile.mkdtemp(prefix="lit-grpo-tools-")
        return self.path

    def remove(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None


class _Log:
    """One pipe that all of a pool's workers write their stdout and stderr to, and the thread that copies it
    into the log file until ``limit`` bytes, then writes :data:`CUT_MARK` and drops the rest."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path, self.limit, self.written, self.cut = path, limit, 0, False
        self._write: int | None = None
        self._reader: threading.Thread | None = None

    def writer(self) -> int:
        """The pipe's writing end (opened with its reading thread on first use)."""
        if self._write is None:
            read, self._write = os.pipe()
            self._reader = threading.Thread(target=self._copy, args=(read,), name="lit-grpo-tool-log",
                                            daemon=True)
            self._reader.start()
            logger.info("the tools' output goes to %s (at most %d bytes)", self.path, self.limit)
        return self._write

    def close(self) -> None:
        """Closes the writing end and waits for the copy to reach the end (once the workers are gone)."""
        if self._write is not None:
            os.close(self._write)
            self._write = None
            self._reader.join(timeout=30)  # a process that escaped its group may hold the pipe open

    def _copy(self, read: int) -> None:
        log = None
        with open(read, "rb", buffering=0) as pipe:
            while chunk := pipe.read(2**16):
                room = self.limit - self.written
                kept = chunk[:room] if room > 0 else b""
                cut = len(chunk) > room and not self.cut
                if not (kept or cut):
                    continue
                try:
                    if log is None:  # opened once there is output
                        self.path.parent.mkdir(parents=True, exist_ok=True)
                        log = open(self.path, "ab", buffering=0)  # noqa: SIM115 - closed below
                    log.write(kept + (CUT_MARK % self.limit if cut else b""))
                except OSError as err:
                    logger.warning("the tools' output cannot be written to %s (%s); it is dropped", self.path,
                                   err)
                    self.cut = True
                self.written += len(kept)
                self.cut = self.cut or cut
        if log is not None:
            log.close()


class _Worker:
    """One worker process (``pid``, the leader of its own process group) and the parent's end of its pipe."""

    def __init__(self, pid: int, conn: Connection, reap: Callable[[], int | None], folder: str) -> None:
        self.pid, self.conn, self._reap, self.folder = pid, conn, reap, folder
        self.calls, self.code, self.killed = 0, None, False

    @classmethod
    def start(cls, pool: WorkerPool, home: str, output: int) -> _Worker:
        parent, child = multiprocessing.Pipe()
        memory = None if pool.memory_mb is None else pool.memory_mb * 2**20
        folder = tempfile.mkdtemp(prefix="worker-", dir=home)  # the calls' working directory
        try:
            if pool.start_method == "forkserver":
                server = _server()
                pid = server.fork(child, output, (_sys_path(), pool.modules, pool.main))
                worker = cls(pid, parent, lambda: server.reap(pid), folder)
            else:
                process = subprocess.Popen(
                    [sys.executable, "-c", _BOOT, "worker", str(child.fileno())], pass_fds=(child.fileno(),),
                    env=pool.env, cwd=home, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                    start_new_session=True)
                parent.send(_sys_path())
                worker = cls(process.pid, parent, process.wait, folder)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        try:
            parent.send({"blob": pool.blob, "memory": memory, "env": pool.env, "home": home,
                         "folder": folder, "modules": pool.modules, "main": pool.main})
            if not parent.poll(STARTUP_TIMEOUT_S):
                raise WorkerStartError(f"a tool worker did not load its tools within {STARTUP_TIMEOUT_S:g} s")
            kind, detail = parent.recv()
        except (EOFError, OSError):
            worker.kill()
            raise WorkerStartError(f"a tool worker ended while loading its tools "
                                   f"({_ending(worker.code)})") from None
        except BaseException:
            worker.kill()
            raise
        if kind != "ready":
            worker.kill()
            raise WorkerStartError(f"a tool worker could not load the tools: {detail}; a worker imports each "
                                   "tool's module anew: define the tools in an importable module, or "
                                   "set isolation: none")
        return worker

    def alive(self) -> bool:
        """Whether the idle worker can take a call (a readable pipe is the end of a dead one)."""
        try:
            return not self.killed and not self.conn.poll(0)
        except OSError:
            return False

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
            self.kill()  # the rest of its group, should the tool have left processes behind
            raise WorkerDied(f"its worker process ended ({_ending(self.code)})") from None

    def kill(self) -> None:
        """Kills the worker's process group (the worker and what its tools started) and reaps the worker; the
        worker is reaped only here, so its pid, the group's id, is not reused before the kill."""
        if self.killed:
            return
        self.killed = True
        for send in (os.killpg, os.kill):  # the group; the worker itself if it has not made its group yet
            try:
                send(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.code = self._reap()
        except (OSError, EOFError, ChildProcessError):
            self.code = None
        self.conn.close()
        shutil.rmtree(self.folder, ignore_errors=True)  # what its last call left (its group is gone)


def _shut(workers: set[_Worker], log: _Log, home: _Home) -> None:
    for worker in list(workers):
        worker.kill()
    workers.clear()
    log.close()
    home.remove()


class _Server:
    """The fork server: a lit-grpo interpreter started once per trainer process, in a session of its own and
    with the allow-listed environment, that imports the tools' modules and forks a worker for each start."""

    def __init__(self) -> None:
        self.conn, child = multiprocessing.Pipe()
        self._sock = socket.socket(fileno=os.dup(self.conn.fileno()))
        self._lock = threading.Lock()
        with tempfile.TemporaryFile() as errors:
            try:
                self.process = subprocess.Popen(
                    [sys.executable, "-c", _BOOT, "server", str(child.fileno())], pass_fds=(child.fileno(),),
                    env=_environment(), cwd=tempfile.gettempdir(), stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
            finally:
                child.close()
            self._finalizer = weakref.finalize(self, _stop_server, self.conn, self._sock, self.process)
            try:
                self.conn.send(_sys_path())
                if not self.conn.poll(STARTUP_TIMEOUT_S):
                    raise WorkerStartError(f"the tool server did not start within {STARTUP_TIMEOUT_S:g} s")
                self.conn.recv()
            except (EOFError, OSError):
                self.stop()
                errors.seek(0)
                said = errors.read().decode(errors="replace").strip().splitlines()[-3:]
                ending = _ending(self.process.returncode)
                raise WorkerStartError(f"the tool server ended at its start ({ending}): {' | '.join(said)}"
                                       ) from None

    def alive(self) -> bool:
        return self._finalizer.alive and self.process.poll() is None

    def fork(self, conn: Connection, output: int, preload: tuple) -> int:
        """A new worker's pid: the server imports ``preload`` (``sys.path``, modules, main script) and forks
        it, serving ``conn`` and writing to ``output``."""
        with self._lock:
            try:
                self.conn.send(("fork", preload))
                socket.send_fds(self._sock, [b"f"], [conn.fileno(), output])
                if not self.conn.poll(STARTUP_TIMEOUT_S):
                    raise WorkerStartError(f"the tool server did not import the tools' modules within "
                                           f"{STARTUP_TIMEOUT_S:g} s")
                kind, detail = self.conn.recv()
            except (EOFError, OSError, WorkerStartError) as err:
                self.stop()
                if isinstance(err, WorkerStartError):
                    raise
                raise WorkerStartError(f"the tool server ended ({_ending(self.process.poll())})") from None
        if kind != "pid":
            raise WorkerStartError(f"a tool worker could not load the tools: {detail}; a worker imports each "
                                   "tool's module anew: define the tools in an importable module, or "
                                   "set isolation: none")
        return detail

    def reap(self, pid: int) -> int | None:
        """The exit code of a worker that was sent ``SIGKILL`` (the server waits for it)."""
        with self._lock:
            if not self.alive():
                return None
            self.conn.send(("reap", pid))
            return self.conn.recv()

    def stop(self) -> None:
        self._finalizer()


def _stop_server(conn: Connection, sock: socket.socket, process: subprocess.Popen) -> None:
    """Closes the server's channel (it then kills its workers' groups and ends) and waits for it."""
    conn.close()
    sock.close()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


_SERVER: _Server | None = None
_SERVER_LOCK = threading.Lock()


def _server() -> _Server:
    """The trainer process's fork server, started (again) where it is not running."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or not _SERVER.alive():
            _SERVER = _Server()
        return _SERVER


def _ending(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _module_of(tool: Callable[..., Any]) -> str | None:
    owner = getattr(tool, "__self__", None)
    return type(owner).__module__ if owner is not None else getattr(tool, "__module__", None)


# What runs in the server and the workers (they start in child_main).


def child_main(role: str, conn: Connection) -> None:
    """The entry of a new interpreter started by :data:`_BOOT`: the fork server, or a ``spawn`` worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle; it kills the workers
    os.set_inheritable(conn.fileno(), False)  # a tool's child holding it would hide the worker's end
    if role == "server":
        _run_server(conn)
    else:
        _serve(conn)


def _run_server(conn: Connection) -> None:
    """Forks a worker per request until the trainer's end of ``conn`` closes, then kills their groups."""
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    conn.send(("ready", None))
    workers: set[int] = set()
    while True:
        try:
            request, detail = conn.recv()
        except (EOFError, OSError):
            break
        if request == "reap":
            try:
                code = os.waitstatus_to_exitcode(os.waitpid(detail, 0)[1])
            except ChildProcessError:
                code = None
            workers.discard(detail)
            conn.send(code)
            continue
        _, fds, _, _ = socket.recv_fds(sock, 1, 2)
        try:
            _preload(*detail)
        except BaseException as err:  # noqa: BLE001 - reported to the parent, which names the problem
            for fd in fds:
                os.close(fd)
            conn.send(("error", f"{type(err).__name__}: {err}"))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                conn.close()
                sock.close()
                _forked(*fds)
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        workers.add(pid)
        conn.send(("pid", pid))
    for pid in workers:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _forked(conn_fd: int, output: int) -> None:
    """A worker forked by the server: its own session, its output to the pool's log, then its calls."""
    os.setsid()
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    os.set_inheritable(conn_fd, False)
    _serve(Connection(conn_fd))


_loaded_main: tuple[str, str] | None = None  # the main script a server or worker imported


def _preload(sys_path: list[str], modules: list[str], main: tuple[str, str] | None) -> None:
    """Imports the tools' modules and, where a tool is defined there, the trainer's main script."""
    global _loaded_main
    sys.path[:] = sys_path
    if main is not None and _loaded_main != main:
        kind, where = main
        if kind == "name":
            module = importlib.import_module(where)  # __name__ is its own: its guard keeps its work out
        else:
            spec = importlib.util.spec_from_file_location("__mp_main__", where)
            module = importlib.util.module_from_spec(spec)
            sys.modules["__mp_main__"] = module
            spec.loader.exec_module(module)
        sys.modules["__main__"] = module
        _loaded_main = main
    for name in modules:
        importlib.import_module(name)


def _serve(conn: Connection) -> None:
    """A worker's life: load the tools, limit the address space, answer calls until the pipe closes."""
    try:
        setup = conn.recv()
        _preload(sys.path, setup["modules"], setup["main"])
        tools = pickle.loads(setup["blob"])
        env, home, folder, memory = setup["env"], setup["home"], setup["folder"], setup["memory"]
        _restore(env)
        os.chdir(home)
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
            os.killpg(0, signal.SIGKILL)  # the trainer is gone: so are this worker and what its tools started
            return
        conn.send(("taken", None))
        outcome = _answer(tools[name], arguments, folder, memory)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a tool may have closed or replaced them
                stream.flush()
        with contextlib.suppress(OSError):  # a tool may have removed it
            os.chdir(home)
        folder = _emptied(folder, home)
        _restore(env)
        try:
            conn.send(outcome)
        except Exception as err:  # noqa: BLE001 - e.g. a str subclass that does not pickle
            conn.send(("raised", f"its result could not be sent back ({type(err).__name__}: {err})"))


def _emptied(folder: str, home: str) -> str:
    """``folder`` emptied of what a call left in it (checked in microseconds; removing a folder may take
    milliseconds, so only a call that left something pays for it), or a new empty folder where that fails."""
    try:
        with os.scandir(folder) as entries:
            left = [entry.path for entry in entries]
    except OSError:  # the tool removed it
        left = []
        with contextlib.suppress(OSError):
            os.makedirs(folder)
    if not left:
        return folder if os.path.isdir(folder) else tempfile.mkdtemp(prefix="worker-")
    for path in left:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        if not any(entries):
            return folder
    # what could not be removed stays out of sight (and goes with the pool's folder)
    return tempfile.mkdtemp(prefix="worker-", dir=home if os.path.isdir(home) else None)


def _restore(env: dict[str, str]) -> None:
    """Sets the worker's environment variables back to ``env`` (a call may have changed them)."""
    if os.environ != env:
        os.environ.clear()
        os.environ.update(env)


def _answer(tool: Callable[..., Any], arguments: dict[str, Any], folder: str,
            memory: int | None) -> tuple[str, Any]:
    try:
        os.chdir(folder)
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
