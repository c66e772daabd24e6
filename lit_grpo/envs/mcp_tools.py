"""Tools served by an MCP server (the Model Context Protocol, ``mcp`` package) as episode tools.

:class:`MCPToolEnvironment` starts an MCP server over stdio, lists its tools and offers them to the policy as
:class:`~lit_grpo.envs.ToolEnvironment` offers Python functions: each tool's name, description and argument
schema go into the episode's tool schemas (rendered by the chat template's tool format, or described in the
system message), calls are read from each turn in the same formats, checked against the schema, and answered
with one ``tool`` message each; a turn without a call is the final answer.

MCP clients are asynchronous; the environment runs them on an event loop of its own, in a daemon thread, so it
is called from synchronous code (the episode loop) and from any thread. Sessions are closed when the episode
ends (``session: episode``), when the environment is closed or collected, and at interpreter exit.

Servers that fail: the rule of this module and of :class:`~lit_grpo.envs.OpenEnvEnvironment`. A server
that fails a call never stops the run by itself: the call is an error observation, counted on its episode
(``tool_timeouts`` for a call that ran past ``timeout_s``, ``tool_errors`` otherwise), the server process is
stopped (killed if it must be), and a new one serves the next call. A server fails a call when the call runs
past ``timeout_s``, when the process exits during it, when it sends a malformed reply (a line that is not
JSON-RPC but names a request id: the call fails at once, not at its time limit; a line without an id is
noise, skipped as the MCP client skips it), or when its reply cannot be used. The calls of other episodes in
flight on a shared server that went down are not failed with it: each is asked once more, on the new server,
one such call at a time, so that a call which brings the server down again does so alone. (When several
calls were in flight as the process exited or sent a malformed reply, which of them caused it is not known:
each is asked again, and the one that causes it again, alone, is counted.) Restarts are bounded: a server
started again that fails again before answering any call counts once, an answered call clears the count,
and when ``max_restarts`` such restarts in a row have failed, the next one is an :class:`MCPServerError`
naming the server and its last failure, which stops the run. A server that does not start is an
:class:`MCPServerError` too.

Install the extra: ``pip install 'lit-grpo[mcp]'``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import re
import sys
import threading
import weakref
from typing import Any, Literal

from lit_grpo.checks import require
from lit_grpo.envs.base import Environment, Episode, Record, StepResult, user_messages
from lit_grpo.envs.tool_calls import (
    ToolCall,
    check_arguments,
    check_call_options,
    cut_result,
    parse_tool_calls,
)
from lit_grpo.envs.tools import describe_tools

#: the optional extra this module's classes need (lit_grpo.extras)
EXTRA = "mcp"
INSTALL_HINT = "MCPToolEnvironment needs the mcp package: pip install 'lit-grpo[mcp]' (or pip install mcp)"


class MCPServerError(RuntimeError):
    """The MCP server could not be started, or stopped answering."""


class MCPToolEnvironment(Environment):
    """The tools of an MCP server (started over stdio) offered to the policy in every episode.

    Args:
        command: The server's executable, e.g. ``npx``; ``python`` (or ``python3``) is the interpreter
            lit-grpo runs in.
        args: Its arguments, e.g. ``[-m, my_package.server]``.
        env: Environment variables for the server, over the default ones MCP passes (null: none).
        cwd: The server's working directory (null: this process's).
        tools: The names of the server's tools to offer (null: all of them).
        session: ``shared``: one server process for all episodes (tools without per-episode state);
            ``episode``: a server process per episode, started at its reset and stopped at its end.
        system_prompt: A system message before the prompt (null: none). Where the chat template has no tool
            format, the tool descriptions and the call format are added to it.
        call_format: How calls are read from a turn: ``auto``, ``tags`` or ``json``, as in
            ``ToolEnvironment``.
        call_tags: Opening and closing tag of a call in the ``tags`` format.
        timeout_s: Wall-clock seconds one tool call may take; then the call is an error observation and the
            server is restarted.
        start_timeout_s: Seconds the server may take to start and list its tools.
        max_restarts: Restarts in a row that may fail again before answering a call (the module docstring);
            past them the run stops with an MCPServerError.
        max_calls_per_turn: Calls run per turn; further calls in the same turn get an error observation.
        max_result_chars: Longest observation; longer results are cut, saying so.
    """

    def __init__(self, command: str, args: list[str] | None = None, env: dict[str, str] | None = None,
                 cwd: str | None = None, tools: list[str] | None = None,
                 session: Literal["shared", "episode"] = "shared", system_prompt: str | None = None,
                 call_format: Literal["auto", "tags", "json"] = "auto",
                 call_tags: tuple[str, str] = ("<tool_call>", "</tool_call>"), timeout_s: float = 30.0,
                 start_timeout_s: float = 60.0, max_restarts: int = 3, max_calls_per_turn: int = 4,
                 max_result_chars: int = 2000) -> None:
        require(bool(command),
                "MCPToolEnvironment: command is empty; give the server's executable, e.g. python")
        require(session in ("shared", "episode"), f"session={session!r}; use shared or episode")
        check_call_options(call_format, max_calls_per_turn, max_result_chars)
        require(timeout_s > 0 and start_timeout_s > 0, "timeout_s and start_timeout_s must be > 0")
        require(isinstance(max_restarts, int) and max_restarts >= 0,
                f"max_restarts={max_restarts!r} must be an integer >= 0")
        self.command, self.args, self.env, self.cwd = command, list(args or []), env, cwd
        self.max_restarts = max_restarts
        self.tool_names = None if tools is None else list(tools)
        self.session, self.system_prompt = session, system_prompt
        self.call_format, self.call_tags = call_format, tuple(call_tags)
        self.timeout_s, self.start_timeout_s = timeout_s, start_timeout_s
        self.max_calls_per_turn, self.max_result_chars = max_calls_per_turn, max_result_chars
        self._runtime = _Runtime()
        self._finalizer = weakref.finalize(self, self._runtime.close)
        self._schemas: list[dict] | None = None  # of the shared server, read when it first starts

    @property
    def server(self) -> str:
        """The server's command line, for messages."""
        return " ".join([self.command, *self.args])

    # ---- the environment ---------------------------------------------------------------------------
    def reset(self, record: Record) -> Episode:
        messages = user_messages(record, self.system_prompt)
        state: dict[str, Any] = {}
        if self.session == "episode":
            server = self._start()
            state["server"] = server
            state["finalizer"] = None
            schemas = self._offered(server.tools)
        else:
            schemas = self._shared_schemas()
        episode = Episode(record=record, messages=messages, tools=schemas,
                          tool_instructions=describe_tools(schemas, self.call_tags), state=state)
        if self.session == "episode":  # stops the episode's server, the one it started again included
            finalizer = weakref.finalize(episode, in_background, _stop_served, self._runtime, state)
            finalizer.atexit = False  # at exit the environment's own finalizer stops every server
            episode.state["finalizer"] = finalizer
        return episode

    def step(self, episode: Episode, text: str) -> StepResult:
        calls = parse_tool_calls(text, self.call_format, self.call_tags)
        if not calls:
            self._end(episode)
            return StepResult(observations=[], done=True)
        observations = []
        for index, call in enumerate(calls):
            episode.tool_calls += 1
            if index >= self.max_calls_per_turn:
                content = _error(episode, f"at most {self.max_calls_per_turn} tool calls are run per turn")
            else:
                content = self.call(episode, call)
            observations.append({"role": "tool", "name": call.name or "unknown", "content": content})
        return StepResult(observations=observations, done=False)

    def reward(self, episode: Episode) -> float | None:
        self._end(episode)
        return None  # the configured reward function scores the final answer

    def call(self, episode: Episode, call: ToolCall) -> str:
        """The observation for one call (its result or an error message); counts errors on ``episode``."""
        if call.error:
            return _error(episode, call.error)
        schema = next((s for s in episode.tools if s["function"]["name"] == call.name), None)
        if schema is None:
            names = sorted(s["function"]["name"] for s in episode.tools)
            return _error(episode, f"unknown tool {call.name!r}; the tools are {names}")
        problem = check_arguments(call.arguments, schema)
        if problem:
            return _error(episode, f"tool {call.name!r}: {problem}")
        result, failure = self._ask(episode, call)
        if failure is not None:
            return failure
        text, failed = result_text(result)
        if failed:
            return _error(episode, f"tool {call.name!r} failed: {text}")
        return cut_result(text, self.max_result_chars)

    def _ask(self, episode: Episode, call: ToolCall) -> tuple[Any, str | None]:
        """(the server's result for ``call``, None), or (None, the error observation) for a call its server
        failed, counted on ``episode``. A call spared by its server's fall is asked once more, on a new
        server, one such call at a time (the module docstring)."""
        try:
            return self._ask_once(episode, call, spare=True)
        except _Down:
            with self._runtime.retrying:
                return self._ask_once(episode, call, spare=False)

    def _ask_once(self, episode: Episode, call: ToolCall, spare: bool) -> tuple[Any, str | None]:
        """One try of :meth:`_ask`; with ``spare``, a call spared by its server's fall raises ``_Down``."""
        server = self._serving(episode)
        try:
            result = server.call(call.name, call.arguments, self.timeout_s)
        except TimeoutError:
            episode.tool_timeouts += 1
            why = f"ran past its time limit of {self.timeout_s:g} s"
            self._failed(server, f"tool {call.name!r} {why}", blame=True)
            return None, f"error: tool {call.name!r} {why}"
        except _Down as down:
            if down.spared and spare:
                raise
            why, blame = f"the MCP server {down.why}", False
        except Exception as err:  # noqa: BLE001  (an answer the client could not use)
            cause = _leaf(err)
            why, blame = f"the MCP server's reply could not be used ({type(cause).__name__}: {cause})", True
        else:
            self._runtime.answered(server)
            return result, None
        self._failed(server, why, blame)
        return None, _error(episode, f"tool {call.name!r} failed: {why}; a new server serves the next call")

    def close(self) -> None:
        """Stops every server process this environment started (the shared one and those of open episodes)."""
        self._runtime.close()

    # ---- servers -----------------------------------------------------------------------------------
    def _start(self, again: bool = False) -> _Server:
        """A new server process; ``again``: in place of one that went down (bounded by max_restarts)."""
        try:
            from mcp import StdioServerParameters
        except ImportError:
            raise ImportError(INSTALL_HINT) from None
        runtime = self._runtime
        if again and runtime.futile >= self.max_restarts:
            raise MCPServerError(
                f"the MCP server {self.server!r} failed again after each of its last {runtime.futile} "
                f"restart(s), before answering any call (the last failure: {runtime.last_failure}); fix the "
                "server (its stderr says why it stopped) or raise max_restarts"
            )
        command = sys.executable if self.command in ("python", "python3") else self.command
        params = StdioServerParameters(command=command, args=self.args, env=self.env, cwd=self.cwd)
        server = runtime.start(params, self.start_timeout_s, self.server)
        server.again = again
        return server

    def _shared_schemas(self) -> list[dict]:
        shared = self._shared()
        with self._runtime.lock:
            if self._schemas is None:
                self._schemas = self._offered(shared.tools)
            return self._schemas

    def _shared(self) -> _Server:
        """The shared server, started (again) if there is none or it went down."""
        runtime = self._runtime
        with runtime.lock:
            if runtime.shared is None or not runtime.shared.alive:
                runtime.stop(runtime.shared)
                runtime.shared = self._start(again=runtime.started)
                runtime.started = True
            return runtime.shared

    def _serving(self, episode: Episode) -> _Server:
        """The server for ``episode``'s next call: its own (``session: episode``) or the shared one, started
        again if it went down."""
        if self.session == "shared":
            return self._shared()
        server = episode.state.get("server")
        if server is None or not server.alive:
            self._runtime.stop(server)
            episode.state["server"] = server = self._start(again=True)
        return server

    def _failed(self, server: _Server, why: str, blame: bool = False) -> None:
        """Stops ``server``, which failed a call (``why``); a restarted server that failed before answering
        any call counts once toward max_restarts. ``blame``: stopped on account of this call, so the other
        calls in flight on it are asked again."""
        runtime = self._runtime
        with runtime.lock:
            runtime.last_failure = why
            if server.again and not server.answered and not server.counted:
                server.counted = True
                runtime.futile += 1
        runtime.stop(server, why if blame else None)

    def _offered(self, tools: list[Any]) -> list[dict]:
        schemas = {t.name: tool_schema(t) for t in tools}
        if self.tool_names is None:
            require(bool(schemas), f"the MCP server {self.server!r} lists no tools")
            return list(schemas.values())
        unknown = [n for n in self.tool_names if n not in schemas]
        require(not unknown, f"MCPToolEnvironment: tools {unknown} are not served by {self.server!r}; it "
                             f"serves {sorted(schemas)}")
        return [schemas[n] for n in self.tool_names]

    def _end(self, episode: Episode) -> None:
        server = episode.state.pop("server", None)
        finalizer = episode.state.pop("finalizer", None)
        if finalizer is not None:
            finalizer.detach()
        if server is not None:
            self._runtime.stop(server)

    def __getstate__(self) -> dict:  # server processes and the event loop stay with this process
        state = dict(self.__dict__)
        state["_runtime"], state["_finalizer"], state["_schemas"] = None, None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._runtime = _Runtime()
        self._finalizer = weakref.finalize(self, self._runtime.close)


def tool_schema(tool: Any) -> dict:
    """The episode tool schema (``ToolEnvironment``'s form) of an MCP ``Tool``: name, description, arguments
    and, where the server declares an output schema, the return value.

    The ``title`` that MCP servers generate for each (sub)schema is left out and ``type`` comes first, and an
    output schema holding only ``result`` (how MCP's Python servers wrap a plain return value) is that value's
    schema: the policy sees the schema ``ToolEnvironment`` shows for a Python function with the same signature
    and docstring.
    """
    parameters = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None)
    function = {"name": tool.name, "description": inspect.cleandoc(tool.description or ""),
                "parameters": _untitled(parameters or {"type": "object", "properties": {}})}
    output = getattr(tool, "output_schema", None) or getattr(tool, "outputSchema", None)
    if output:
        output = _untitled(output)
        wrapped = set(output.get("properties", {})) == {"result"} and output.get("required") == ["result"]
        function["return"] = output["properties"]["result"] if wrapped else output
    return {"type": "function", "function": function}


def _untitled(schema: Any) -> Any:
    """``schema`` without each (sub)schema's ``title``; argument names (keys of ``properties``) are kept."""
    if isinstance(schema, list):
        return [_untitled(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in sorted(schema.items(), key=lambda item: item[0] != "type"):  # type first, then as given
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: _untitled(sub) for name, sub in value.items()}
        else:
            out[key] = _untitled(value)
    return out


def result_text(result: Any) -> tuple[str, bool]:
    """The text of an MCP tool result (``CallToolResult`` or its JSON form) and whether it is an error result.

    Text content items are joined by newlines; other content (images, resources) is shown as JSON; a result
    with no content shows its structured content as JSON.
    """
    if result is None:
        return "", False
    if isinstance(result, str | int | float) and not isinstance(result, bool):
        return result if isinstance(result, str) else repr(result), False
    data = result if isinstance(result, dict) else _as_dict(result)
    failed = bool(data.get("is_error", data.get("isError", False)))
    items = [c if isinstance(c, dict) else _as_dict(c) for c in data.get("content") or []]
    parts = [item.get("text", "") if item.get("type") == "text" else json.dumps(item, default=str)
             for item in items]
    if not parts:
        structured = data.get("structured_content", data.get("structuredContent", data.get("data")))
        if structured is not None:
            parts = [structured if isinstance(structured, str) else json.dumps(structured, default=str)]
    return "\n".join(parts), failed


def _as_dict(value: Any) -> dict:
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "__dict__"):
        return dict(vars(value))
    return {"type": "unknown", "text": str(value)}


async def _list_tools(session) -> list[Any]:
    """Every tool of every page of the server's listing (mcp 2's and 1's pagination arguments)."""
    tools, cursor = [], None
    while True:
        if cursor is None:
            page = await session.list_tools()
        else:
            try:
                from mcp.types import PaginatedRequestParams

                page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            except (ImportError, TypeError):
                page = await session.list_tools(cursor=cursor)
        tools += list(page.tools)
        cursor = getattr(page, "next_cursor", getattr(page, "nextCursor", None))
        if not cursor:
            return tools


def in_background(function, *args) -> None:
    """Runs ``function(*args)`` in a daemon thread. For finalizers: they run in whichever thread the garbage
    collector runs in (an event loop's included), which a blocking close could stall."""
    threading.Thread(target=function, args=args, daemon=True, name="lit-grpo-close").start()


def _leaf(err: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups: what actually went wrong."""
    # an exception group (3.11+)
    while isinstance(getattr(err, "exceptions", None), tuple) and err.exceptions:
        err = err.exceptions[0]
    return err


def _error(episode: Episode, message: str) -> str:
    episode.tool_errors += 1
    return f"error: {message}"


def _stop_served(runtime: _Runtime, state: dict) -> None:
    """Stops the server an episode holds (``state["server"]``): for the finalizer of a dropped episode."""
    runtime.stop(state.get("server"))


#: a request id in a line the server sent (``"id": 7`` or ``"id": "a"``): what makes a line a reply
_REQUEST_ID = re.compile(r'"id"\s*:\s*(-?\d|")')
#: the JSON-RPC error code of a call whose connection closed under it (``mcp.types.CONNECTION_CLOSED``)
CONNECTION_CLOSED = -32000


def _malformed_reply(error: Exception) -> str | None:
    """What is wrong with the line behind ``error`` (the MCP client's parse error for a line that is not
    JSON-RPC) when it names a request id, and so is a reply, malformed; None for a line without one, which is
    noise (a stray print)."""
    errors = getattr(error, "errors", None)
    try:
        items = errors() if callable(errors) else []
    except Exception:  # noqa: BLE001  (not pydantic's: nothing to read)
        return None
    for item in items:
        line = item.get("input")
        if (isinstance(line, dict) and "id" in line) or (isinstance(line, str) and _REQUEST_ID.search(line)):
            shown = line if isinstance(line, str) else json.dumps(line, default=str)
            return f"{item.get('msg', type(error).__name__)}: {shown[:120]!r}"
    return None


def _connection_closed(call: asyncio.Future) -> bool:
    """Whether a finished ``session.call_tool`` ended because the connection closed under it."""
    if call.cancelled():
        return True
    error = call.exception()
    return getattr(getattr(error, "error", None), "code", None) == CONNECTION_CLOSED


class _Down(Exception):
    """A call lost because its server went down under it: ``why`` (in words, after "the MCP server"), and
    whether the call is ``spared`` (asked again on a new server: the environment stopped the server on
    account of another call, or several calls were in flight, or the call never reached the server)."""

    def __init__(self, why: str, spared: bool) -> None:
        super().__init__(why)
        self.why, self.spared = why, spared


# ---- the event loop thread and the server sessions on it ------------------------------------------------
class _Runtime:
    """An event loop in a daemon thread (started on first use) and the servers running on it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.shared: _Server | None = None
        self.started = False  # a shared server was started once: the next one is a restart
        self.servers: set[_Server] = set()
        self.futile = 0  # restarted servers in a row that failed before answering a call
        self.last_failure = ""
        self.retrying = threading.Lock()  # held by a call asked again after its server went down
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def run(self, coroutine, timeout: float):
        """Runs ``coroutine`` on the loop; waits at most ``timeout`` s (then cancels it: TimeoutError)."""
        loop = self._ensure_loop()
        if threading.current_thread() is self._thread:  # waiting here would stall the loop it waits on
            coroutine.close()
            raise RuntimeError("MCPToolEnvironment: a blocking call from its own event loop thread")
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer in {timeout:g} s") from None

    def start(self, params, timeout: float, name: str) -> _Server:
        server = _Server(self, params, name)
        with self.lock:
            self.servers.add(server)
        try:
            server.open(timeout)
        except BaseException:
            self.stop(server)
            raise
        return server

    def stop(self, server: _Server | None, blame: str | None = None) -> None:
        """Stops ``server``; ``blame``: on account of a call that failed so (its other calls are spared)."""
        if server is None:
            return
        with self.lock:
            self.servers.discard(server)
            if self.shared is server:
                self.shared = None
        server.close(blame)

    def answered(self, server: _Server) -> None:
        with self.lock:
            server.answered, self.futile = True, 0

    def close(self) -> None:
        with self.lock:
            servers, self.servers, self.shared = list(self.servers), set(), None
        for server in servers:
            server.close()
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None and thread is not threading.current_thread():
                thread.join(5)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="lit-grpo-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop


class _Server:
    """One MCP server process and its client session, owned by one task on the runtime's loop (the MCP
    client's task groups must be entered and left by the same task)."""

    def __init__(self, runtime: _Runtime, params, name: str) -> None:
        self.runtime, self.params, self.name = runtime, params, name
        self.session = None
        self.tools: list[Any] = []
        self.closed = False
        self.again = self.answered = self.counted = False  # the environment's, for max_restarts
        self.in_flight = 0  # calls waiting for their answer (read and written on the loop only)
        self.down: tuple[str, bool] | None = None  # how it went down under its calls: (why, spared)
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        return (not self.closed and self.down is None and self.session is not None and self._task is not None
                and not self._task.done())

    def open(self, timeout: float) -> None:
        try:
            self.tools = self.runtime.run(self._open(timeout), timeout + 10)
        except Exception as err:
            cause = _leaf(err)
            raise MCPServerError(f"the MCP server {self.name!r} did not start and list its tools "
                                 f"({type(cause).__name__}: {cause}; start_timeout_s={timeout:g}); check the "
                                 "command, args and cwd (the server must speak MCP over stdio; its stderr "
                                 "says why it stopped), or raise start_timeout_s") from err

    def call(self, name: str, arguments: dict, timeout: float):
        return self.runtime.run(self._call(name, arguments, timeout), timeout + 5)

    def close(self, blame: str | None = None) -> None:
        """Stops the process; ``blame``: on account of a call that failed so, which spares the others."""
        if self.closed:
            return
        self.closed = True
        loop = self.runtime._loop
        if self._task is None or loop is None:
            return
        down = (f"was stopped as another call {blame}", True) if blame else ("was stopped", False)
        if threading.current_thread() is self.runtime._thread:  # e.g. a finalizer the loop's thread ran
            loop.call_soon(lambda: asyncio.ensure_future(self._close(down)))
            return
        try:
            self.runtime.run(self._close(down), 15)
        except Exception:  # the loop is gone or the server would not stop: nothing more to do here
            pass

    def _went_down(self, why: str, spared: bool) -> tuple[str, bool]:
        """How the server went down under its calls: the first account given stays (on the loop only)."""
        if self.down is None:
            self.down = (why, spared)
        return self.down

    async def _on_message(self, message: Any) -> None:
        """The client's handler of what the server sends besides answers: a malformed reply (a line that is
        not JSON-RPC but names a request id) takes the server down at once, failing the calls in flight now
        rather than at their time limit (which of them it answered cannot be read: with several, each is
        spared)."""
        wrong = _malformed_reply(message) if isinstance(message, Exception) and self.in_flight else None
        if wrong is not None:
            self._went_down(f"sent a malformed reply ({wrong})", self.in_flight > 1)
            if self._stop is not None:
                self._stop.set()

    async def _open(self, timeout: float) -> list[Any]:
        from mcp import ClientSession, stdio_client

        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()

        async def own() -> None:
            try:
                async with (stdio_client(self.params) as (read, write),
                            ClientSession(read, write, message_handler=self._on_message) as session):
                    await session.initialize()
                    tools = await _list_tools(session)
                    self.session = session
                    ready.set_result(tools)
                    await self._stop.wait()
            except BaseException as err:  # noqa: BLE001  (handed to the opener, or the session is over)
                if not ready.done():
                    ready.set_exception(err if isinstance(err, Exception) else RuntimeError(repr(err)))
                if isinstance(err, asyncio.CancelledError):
                    raise
            finally:
                self.session = None

        self._task = asyncio.ensure_future(own())
        try:
            return await asyncio.wait_for(asyncio.shield(ready), timeout)
        except BaseException:
            await self._close()
            raise

    async def _call(self, name: str, arguments: dict, timeout: float):
        session = self.session
        if session is None or self.down is not None or self._task is None or self._task.done():
            raise _Down((self.down or ("had exited",))[0], spared=True)  # the call never reached it
        self.in_flight += 1
        try:
            call = asyncio.ensure_future(session.call_tool(name, arguments))
            done, _ = await asyncio.wait({call, self._task}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
            if call in done and not _connection_closed(call):
                return call.result()
            call.cancel()
            if call in done or self._task in done:  # the session ended under the call
                raise _Down(*self._went_down("exited during the call", self.in_flight > 1))
            raise TimeoutError(f"no answer in {timeout:g} s")
        finally:
            self.in_flight -= 1

    async def _close(self, down: tuple[str, bool] = ("was stopped", False)) -> None:
        self._went_down(*down)
        if self._stop is not None:
            self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        try:  # leaving the client's context ends the process (terminated, then killed, if it does not exit)
            await asyncio.wait_for(asyncio.shield(task), 10)
        except BaseException:  # noqa: BLE001
            task.cancel()
            try:
                await asyncio.wait_for(task, 5)
            except BaseException:  # noqa: BLE001
                pass
