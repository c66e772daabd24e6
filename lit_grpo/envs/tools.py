"""Tool use: plain Python callables offered to the policy, called from its turns, answered as observations.

Each tool is a function (or bound method, sync or ``async``) with type hints and a Google-style docstring; its
JSON schema comes from ``transformers.utils.get_json_schema``. An assistant turn calls tools in one of the
formats of :func:`lit_grpo.envs.tool_calls.parse_tool_calls`; a turn without a call is the final answer and
ends the episode. Every call gets one ``tool`` message back: the result, or an error message when the call is
malformed, names an unknown tool, has missing, extra or mistyped arguments, raises (``SystemExit`` and
``KeyboardInterrupt`` included), returns something other than text or a number, runs past ``timeout_s`` or
ends its worker process. Errors are counted on the episode (``tool_errors``, ``tool_timeouts``) and the
episode goes on: no tool failure stops the run.

By default tools run isolated (``isolation: process``): in worker processes (:mod:`lit_grpo.envs.isolation`)
whose wall-clock limit kills the worker and what it started, C code included, with a memory limit, none of the
trainer's state, an allow-listed environment, an empty working directory for each call, output to a log;
up to ``workers`` calls of different episodes run at once (:meth:`ToolEnvironment.astep`, which the rollout
awaits for all live episodes together). ``isolation: none`` runs them in the trainer's process: async tools
concurrently on the rollout's event loop (the limit cancels them at their next ``await``), sync ones one at a
time in the calling thread under :func:`lit_grpo.rewards.scoring.time_limit` (main thread only; C code is not
stopped).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Literal

from transformers.utils import get_json_schema

from lit_grpo.checks import require
from lit_grpo.envs.base import Environment, Episode, Record, StepResult, run_coroutine, user_messages
from lit_grpo.envs.isolation import (
    RESULT_TYPES,
    StartMethod,
    ToolTimeout,
    WorkerDied,
    WorkerPool,
    check_isolation_options,
    check_picklable,
)
from lit_grpo.envs.tool_calls import (
    ToolCall,
    check_arguments,
    check_call_options,
    cut_result,
    parse_tool_calls,
)
from lit_grpo.rewards.scoring import RewardTimeout, time_limit

DEFAULT_TIMEOUT_S = 5.0
_STARTING = threading.Lock()  # creates an environment's worker pool once
Isolation = Literal["process", "none"]


def tool_schema(tool: Callable[..., Any]) -> dict:
    """The JSON schema of ``tool`` (type hints and docstring), with a clear error when they are missing."""
    try:
        return get_json_schema(tool)
    except Exception as err:
        name = getattr(tool, "__name__", type(tool).__name__)
        raise ValueError(
            f"tool {name!r} has no usable JSON schema ({err}); give every argument a type hint and describe "
            "it in a Google-style docstring (Args: name: description)"
        ) from None


def describe_tools(schemas: list[dict], tags: tuple[str, str]) -> str:
    """Tool instructions for chat templates without a tool format: the schemas and the call format."""
    opening, closing = tags
    listing = "\n".join(json.dumps(s["function"]) for s in schemas)
    return (
        "You can call these tools (JSON schemas):\n"
        f"{listing}\n"
        f'To call a tool, write {opening}{{"name": "<tool name>", "arguments": {{<arguments>}}}}{closing} '
        "and stop; the result comes back in the next message. When you know the answer, reply without a "
        "tool call."
    )


class ToolEnvironment(Environment):
    """The policy may call tools in its turns; a turn without a tool call is its final answer.

    Args:
        tools: The tools: functions (or their import paths, e.g. ``lit_grpo.envs.calculator.calculator``) with
            type hints and a docstring describing every argument.
        system_prompt: A system message before the prompt (null: none). Where the chat template has no tool
            format, the tool descriptions and the call format are added to it.
        call_format: ``tags``: calls inside ``call_tags`` holding ``{"name", "arguments"}`` JSON (Qwen2.5/3
            and the default for templates without a tool format); ``json``: the whole turn is one
            ``{"name", "parameters"}`` object (Llama 3.x); ``auto``: tags, else a whole-turn JSON call.
        call_tags: Opening and closing tag of a call in the ``tags`` format.
        timeout_s: Wall-clock seconds a tool call may run. Isolated, the worker is killed at the limit; with
            ``isolation: none`` see the module docstring for what stops a call.
        max_calls_per_turn: Calls run per turn; further calls in the same turn get an error observation.
        max_result_chars: Longest observation; longer results are cut, saying so.
        isolation: ``process`` (default): every call runs in a worker process with a hard wall-clock limit, a
            memory limit and no access to the trainer's state (the tools must be picklable: module-level
            functions, or methods of picklable objects); ``none``: in the trainer's process (trusted, cheap
            tools; async tools still run concurrently).
        workers: Most calls running at once over all episodes (worker processes, started on demand). The calls
            of one turn run in order; those of different episodes side by side.
        memory_mb: Address space a worker may take beyond what loading its tools took (null: no limit); a tool
            that allocates past it gets a ``MemoryError`` observation.
        start_method: How workers start: ``forkserver`` (forked from a server that imported the tools' modules
            once) or ``spawn``.
        pass_env: Environment variables of the trainer an isolated tool sees besides ``PATH``, ``HOME``,
            ``USER``, ``LOGNAME``, ``LANG``, ``LANGUAGE``, ``LC_*``, ``TZ``, ``TMPDIR`` and ``PYTHONPATH``:
            names or patterns (``HF_TOKEN``, ``AWS_*``; ``["*"]``: all). Others (tokens, keys) stay out of
            its reach.
        log_path: The file isolated tools' stdout and stderr go to (appended; null: a new
            ``lit-grpo-tools-<pid>-<n>.log`` in the system's temporary folder).
        log_bytes: Most bytes of the tools' output kept in the log; the rest is dropped after a line saying
            so.
        calls_per_worker: Calls a worker answers before a fresh one replaces it (null: no limit, so module
            globals and caches a tool keeps live on in its worker; 1: every call in a new process).
    """

    def __init__(self, tools: list[Callable[..., Any]] | None = None, system_prompt: str | None = None,
                 call_format: Literal["auto", "tags", "json"] = "auto",
                 call_tags: tuple[str, str] = ("<tool_call>", "</tool_call>"),
                 timeout_s: float = DEFAULT_TIMEOUT_S, max_calls_per_turn: int = 4,
                 max_result_chars: int = 2000, isolation: Isolation = "process", workers: int = 4,
                 memory_mb: int | None = 1024, start_method: StartMethod = "forkserver",
                 pass_env: list[str] | None = None, log_path: str | None = None, log_bytes: int = 2**20,
                 calls_per_worker: int | None = None) -> None:
        check_call_options(call_format, max_calls_per_turn, max_result_chars)
        require(timeout_s > 0, f"timeout_s={timeout_s} must be > 0")
        require(isolation in ("process", "none"), f"isolation={isolation!r}; use process or none")
        require(workers >= 1, f"workers={workers} must be >= 1")
        require(memory_mb is None or memory_mb >= 1,
                f"memory_mb={memory_mb} must be >= 1, or null for no limit")
        require(start_method in ("forkserver", "spawn"),
                f"start_method={start_method!r}; use forkserver or spawn")
        pass_env = [] if pass_env is None else pass_env
        check_isolation_options(pass_env, log_bytes, calls_per_worker)
        self.tools: dict[str, Callable[..., Any]] = {}
        self.schemas: list[dict] = []
        for tool in [*(tools or []), *self.own_tools()]:
            schema = tool_schema(tool)
            name = schema["function"]["name"]
            require(name not in self.tools, f"two tools are named {name!r}; tool names must be unique")
            self.tools[name], self.schemas = tool, [*self.schemas, schema]
        require(bool(self.tools), "ToolEnvironment needs at least one tool (tools=[...])")
        self.system_prompt, self.call_format, self.call_tags = system_prompt, call_format, tuple(call_tags)
        self.timeout_s, self.max_calls_per_turn = timeout_s, max_calls_per_turn
        self.max_result_chars = max_result_chars
        self.isolation, self.workers = isolation, workers
        self.memory_mb, self.start_method = memory_mb, start_method
        self.pass_env, self.log_path, self.log_bytes = list(pass_env), log_path, log_bytes
        self.calls_per_worker = calls_per_worker
        self._pool: WorkerPool | None = None
        self._waiters: ThreadPoolExecutor | None = None
        self._limit: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        if isolation == "process":
            check_picklable(self.tools)  # a tool that cannot reach a worker: an error now, not in every call

    def own_tools(self) -> list[Callable[..., Any]]:
        """Tools a subclass always offers (bound methods, e.g. a search over its collection)."""
        return []

    def reset(self, record: Record) -> Episode:
        return Episode(record=record, messages=user_messages(record, self.system_prompt), tools=self.schemas,
                       tool_instructions=describe_tools(self.schemas, self.call_tags))

    def step(self, episode: Episode, text: str) -> StepResult:
        return run_coroutine(self.astep(episode, text))

    async def astep(self, episode: Episode, text: str) -> StepResult:
        """:meth:`step` as a coroutine: the rollout awaits the steps of all live episodes together, so the
        tool calls of different episodes run at once (up to ``workers``); the calls of one turn run in
        order."""
        calls = parse_tool_calls(text, self.call_format, self.call_tags)
        if not calls:
            return StepResult(observations=[], done=True)
        observations = []
        for index, call in enumerate(calls):
            episode.tool_calls += 1
            if index >= self.max_calls_per_turn:
                result = self._error(episode,
                                     f"at most {self.max_calls_per_turn} tool calls are run per turn")
            else:
                result = await self.acall(episode, call)
            observations.append({"role": "tool", "name": call.name or "unknown", "content": result})
        return StepResult(observations=observations, done=False)

    def answers(self, episode: Episode, text: str) -> bool:
        """A turn without a tool call is the answer (checked without running anything)."""
        return not parse_tool_calls(text, self.call_format, self.call_tags)

    def call(self, episode: Episode, call: ToolCall) -> str:
        """The observation for one call (its result or an error message); counts errors on ``episode``."""
        return run_coroutine(self.acall(episode, call))

    async def acall(self, episode: Episode, call: ToolCall) -> str:
        """:meth:`call` as a coroutine."""
        if call.error:
            return self._error(episode, call.error)
        tool = self.tools.get(call.name)
        if tool is None:
            return self._error(episode, f"unknown tool {call.name!r}; the tools are {sorted(self.tools)}")
        problem = check_arguments(call.arguments, self._schema(call.name))
        if problem:
            return self._error(episode, f"tool {call.name!r}: {problem}")
        name = call.name
        try:
            if self.isolation == "process":
                kind, value = await self._isolated(name, call.arguments)
            elif _is_async(tool):
                kind, value = await self._awaited(tool, call.arguments)
            else:
                kind, value = self._inline(tool, call.arguments)
        except (ToolTimeout, RewardTimeout, TimeoutError):
            episode.tool_timeouts += 1
            return f"error: tool {name!r} ran past its time limit of {self.timeout_s:g} s"
        except WorkerDied as err:
            return self._error(episode, f"tool {name!r} failed: {err}")
        if kind == "raised":
            return self._error(episode, f"tool {name!r} failed: {value}")
        if kind == "type":  # an isolated tool's result of another type: only its type name came back
            return self._error(episode, f"tool {name!r} returned {value}, not text or a number")
        return self._text(episode, name, value)

    async def _isolated(self, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
        with _STARTING:  # steps may come from several threads (ConcurrentSteps, a sync step per thread)
            if self._pool is None:
                self._waiters = ThreadPoolExecutor(self.workers, thread_name_prefix="lit-grpo-tool-wait")
                self._pool = WorkerPool(self.tools, self.workers, self.memory_mb, self.start_method,
                                        self.pass_env, self.log_path, self.log_bytes, self.calls_per_worker)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._waiters, self._pool.call, name, arguments, self.timeout_s)

    async def _awaited(self, tool: Callable[..., Any], arguments: dict[str, Any]) -> tuple[str, Any]:
        loop = asyncio.get_running_loop()
        if self._limit is None or self._loop is not loop:  # a semaphore belongs to one event loop
            self._limit, self._loop = asyncio.Semaphore(self.workers), loop
        async with self._limit, asyncio.timeout(self.timeout_s):
            with _own_interrupts() as real:
                try:
                    return "ok", await tool(**arguments)
                except (asyncio.CancelledError, TimeoutError):
                    raise
                except BaseException as err:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: the tool's failure
                    if real.is_set():
                        raise
                    return "raised", f"{type(err).__name__}: {err}"

    def _inline(self, tool: Callable[..., Any], arguments: dict[str, Any]) -> tuple[str, Any]:
        with _own_interrupts() as real:
            try:
                with time_limit(self.timeout_s, f"tool {getattr(tool, '__name__', 'call')!r}"):
                    return "ok", tool(**arguments)
            except RewardTimeout:
                raise
            except BaseException as err:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: the tool's failure
                if real.is_set():
                    raise
                return "raised", f"{type(err).__name__}: {err}"

    def close(self) -> None:
        """Stops the tool workers and the processes their tools started (a later call starts new ones)."""
        if self._pool is not None:
            self._pool.close()
        if self._waiters is not None:
            self._waiters.shutdown(wait=False)
        self._pool = self._waiters = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pool": None, "_waiters": None, "_limit": None, "_loop": None}

    def _schema(self, name: str) -> dict:
        return next(s for s in self.schemas if s["function"]["name"] == name)

    def _text(self, episode: Episode, name: str, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, RESULT_TYPES):
            return self._error(episode,
                               f"tool {name!r} returned {type(value).__name__}, not text or a number")
        text = value if isinstance(value, str) else repr(value)
        return cut_result(text, self.max_result_chars)

    @staticmethod
    def _error(episode: Episode, message: str) -> str:
        episode.tool_errors += 1
        return f"error: {message}"


def _is_async(tool: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(tool) or inspect.iscoroutinefunction(type(tool).__call__)


_interrupts = {"depth": 0, "previous": None, "real": threading.Event()}


@contextmanager
def _own_interrupts() -> Iterator[threading.Event]:
    """Tells a ``KeyboardInterrupt`` the tool raised itself (its failure) from a real Ctrl-C (which stops the
    run): in the main thread, a ``SIGINT`` during the block sets the yielded event before raising as usual."""
    if threading.current_thread() is not threading.main_thread():
        # signals reach the main thread only: any KeyboardInterrupt here is the tool's
        yield threading.Event()
        return
    state = _interrupts
    if state["depth"] == 0:
        state["real"] = threading.Event()

        def handler(signum: int, frame: Any) -> None:
            state["real"].set()
            raise KeyboardInterrupt

        state["previous"] = signal.signal(signal.SIGINT, handler)
    state["depth"] += 1
    try:
        yield state["real"]
    finally:
        state["depth"] -= 1
        if state["depth"] == 0:
            previous = state["previous"]
            signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
