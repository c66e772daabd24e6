"""OpenEnv servers (``openenv-core``, the environment protocol TRL integrates) as lit-grpo environments.

Each episode opens its own WebSocket session on the server (OpenEnv's ``GenericEnvClient``) and holds it until
the episode ends, so the server must allow as many concurrent sessions as episodes run at once
(``create_app(..., max_concurrent_envs=...)`` and an environment with
``SUPPORTS_CONCURRENT_SESSIONS = True``); a server at its limit is an error that says so. Two kinds of action:

- ``text``: the assistant's turn text goes into one field of the server's action, one field of each
  observation (or the whole observation as JSON) comes back as a message; the episode ends when the server
  says ``done``.
- ``tools``: the server's MCP tools (OpenEnv's ``list_tools`` action, at reset) are offered to the policy as
  episode tools, with their names, descriptions and argument schemas; each tool call of a turn is sent as a
  ``call_tool`` action (tool name and arguments) and its result comes back as a ``tool`` message; a turn
  without a call is the final answer and ends the episode (as in :class:`~lit_grpo.envs.ToolEnvironment`).

The episode's reward is the sum (or last) of the server's rewards (at reset and at each step), or left to the
configured reward (``reward: none``) for every episode: one source per run, never a mix. An episode that the
server answered without any reward is an error naming the server, or 0 with ``missing_reward: zero``; an
episode cut (truncated) before its first turn reached the server scores 0.

Servers that fail follow the rule stated in :mod:`lit_grpo.envs.mcp_tools`, with a session in place of a
server process: a step the server fails (no answer in ``message_timeout_s``, the connection closed under it,
the server gone, an answer that cannot be read) does not stop the run. It is an error observation (the turn's
message, or the tool call's), counted on the episode (``tool_timeouts`` for a step past
``message_timeout_s``, ``tool_errors`` otherwise); its session is closed, and the episode's next step opens a
new one and resets it (the server's state for the episode starts over; the reset's reward counts as the
first one's does). A new session that fails before answering a step counts once toward ``max_restarts``, an
answered step clears the count, and when ``max_restarts`` such sessions in a row have failed, the next one is
an :class:`OpenEnvError` naming the server and its last failure, which stops the run. A session that cannot
be opened or reset (the server unreachable, at its session limit) and a step the server answers with an error
of its own (its action refused, its environment raised: a mismatch of configuration, not a passing fault)
stop the run with an :class:`OpenEnvError` naming the server and the cause.

Sessions are closed when the episode ends, when its reward is read, when any call to the server fails (reset
included), when the episode object is garbage-collected, and by :meth:`OpenEnvEnvironment.close`.

Install the extra: ``pip install 'lit-grpo[openenv]'``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import weakref
from typing import Any, Literal

from lit_grpo.checks import require
from lit_grpo.envs.base import Environment, Episode, Record, StepResult, user_messages
from lit_grpo.envs.mcp_tools import in_background, result_text
from lit_grpo.envs.tool_calls import check_arguments, check_call_options, cut_result, parse_tool_calls
from lit_grpo.envs.tools import describe_tools

#: the optional extra this module's classes need (lit_grpo.extras)
EXTRA = "openenv"
INSTALL_HINT = ("OpenEnvEnvironment needs openenv-core: pip install 'lit-grpo[openenv]' (or "
                "pip install openenv-core)")


class OpenEnvError(RuntimeError):
    """A reset, step or connection to an OpenEnv server failed (an infrastructure fault, not a bad action)."""


class OpenEnvEnvironment(Environment):
    """An OpenEnv environment server, one session per episode.

    Args:
        base_url: The server's address, e.g. ``http://127.0.0.1:8000``.
        actions: ``text``: each assistant turn's text is sent in ``action_field``; ``tools``: the server's MCP
            tools are offered to the policy and each tool call is sent as a ``call_tool`` action.
        action_field: The action field that receives each assistant turn's text (``text`` actions).
        observation_field: The observation field shown to the policy (null: the whole observation as JSON;
            ``text`` actions).
        opening: The opening user message: the record's ``prompt``, the ``observation`` returned by the
            server's reset, or ``both`` (the prompt, a blank line, the observation).
        observation_role: Role of the observation messages of ``text`` actions (``user``, or ``tool``).
        reward: The episode's reward: the ``sum`` or the ``last`` of the rewards the server gave (at reset and
            at each step; answers without one count 0), or ``none`` to score every episode's final answer with
            the configured reward function.
        missing_reward: An episode the server answered without any reward (``reward: sum | last``): ``error``
            (the run stops, naming the server) or ``zero``. An episode truncated before its first turn reached
            the server scores 0 either way.
        system_prompt: A system message before the opening message (null: none). With ``tools`` actions on a
            chat template without a tool format, the tool descriptions and the call format are added to it.
        call_format: How tool calls are read from a turn (``tools`` actions): ``auto``, ``tags`` or ``json``,
            as in :class:`~lit_grpo.envs.ToolEnvironment`.
        call_tags: Opening and closing tag of a call in the ``tags`` format.
        max_calls_per_turn: Calls sent per turn; further calls in the same turn get an error observation.
        max_result_chars: Longest tool result (``tools`` actions); longer ones are cut, saying so.
        connect_timeout_s: Seconds to open a session.
        message_timeout_s: Seconds to wait for the server's answer to a reset or a step; a step past it is a
            timeout observation and the episode goes on in a new session.
        max_restarts: New sessions in a row that may fail again before answering a step (the module
            docstring); past them the run stops with an OpenEnvError.
    """

    def __init__(self, base_url: str, actions: Literal["text", "tools"] = "text",
                 action_field: str = "message", observation_field: str | None = None,
                 opening: Literal["prompt", "observation", "both"] = "prompt",
                 observation_role: Literal["user", "tool"] = "user",
                 reward: Literal["sum", "last", "none"] = "sum",
                 missing_reward: Literal["error", "zero"] = "error", system_prompt: str | None = None,
                 call_format: Literal["auto", "tags", "json"] = "auto",
                 call_tags: tuple[str, str] = ("<tool_call>", "</tool_call>"), max_calls_per_turn: int = 4,
                 max_result_chars: int = 2000, connect_timeout_s: float = 10.0,
                 message_timeout_s: float = 60.0, max_restarts: int = 3) -> None:
        require(base_url.startswith(("http://", "https://", "ws://", "wss://")),
                f"OpenEnvEnvironment: base_url={base_url!r} must start with http://, https://, "
                "ws:// or wss://")
        require(actions in ("text", "tools"), f"actions={actions!r}; use text or tools")
        require(opening in ("prompt", "observation", "both"),
                f"opening={opening!r}; use prompt, observation or both")
        require(observation_role in ("user", "tool"),
                f"observation_role={observation_role!r}; use user or tool")
        require(reward in ("sum", "last", "none"), f"reward={reward!r}; use sum, last or none")
        require(missing_reward in ("error", "zero"), f"missing_reward={missing_reward!r}; use error or zero")
        check_call_options(call_format, max_calls_per_turn, max_result_chars)
        require(connect_timeout_s > 0 and message_timeout_s > 0,
                "connect_timeout_s and message_timeout_s must be > 0")
        require(isinstance(max_restarts, int) and max_restarts >= 0,
                f"max_restarts={max_restarts!r} must be an integer >= 0")
        self.base_url, self.actions = base_url, actions
        self.action_field, self.observation_field = action_field, observation_field
        self.opening, self.observation_role, self.reward_mode = opening, observation_role, reward
        self.missing_reward, self.system_prompt = missing_reward, system_prompt
        self.call_format, self.call_tags = call_format, tuple(call_tags)
        self.max_calls_per_turn, self.max_result_chars = max_calls_per_turn, max_result_chars
        self.connect_timeout_s, self.message_timeout_s = connect_timeout_s, message_timeout_s
        self.max_restarts = max_restarts
        self._sessions: dict[int, Any] = {}  # id -> open client, for close()
        self._lock = threading.Lock()
        self._futile = 0  # new sessions in a row that failed before answering a step
        self._last_failure = ""

    # ---- the environment ---------------------------------------------------------------------------
    def reset(self, record: Record) -> Episode:
        client = self._connect()
        try:
            result = self._call(client, "reset", lambda: client.reset())
            episode = Episode(record=record, messages=user_messages(record, self.system_prompt),
                              state={"rewards": [result.reward], "steps": 0})
            if self.actions == "tools":
                episode.tools = self._list_tools(client)
                episode.state["schemas"] = {s["function"]["name"]: s for s in episode.tools}
                episode.tool_instructions = describe_tools(episode.tools, self.call_tags)
            shown = self._show(result.observation)
        except BaseException:
            self._discard(client)
            raise
        self._own(episode, client)
        if self.opening == "observation":
            episode.messages[-1]["content"] = shown
        elif self.opening == "both":
            episode.messages[-1]["content"] = f"{episode.messages[-1]['content']}\n\n{shown}"
        if result.done:  # a server may end an episode at reset
            self._close(episode)
        return episode

    def step(self, episode: Episode, text: str) -> StepResult:
        require("client" in episode.state, "OpenEnvEnvironment.step on an episode whose session has ended")
        if self.actions == "tools":
            return self._tool_step(episode, text)
        result, failure = self._send(episode, {self.action_field: text})
        if failure is not None:
            content = f"error: {failure}; a new session, reset, serves the next turn"
            return StepResult([{"role": self.observation_role, "content": content}], done=False)
        if result.done:
            self._close(episode)
            return StepResult(observations=[], done=True)
        observation = {"role": self.observation_role, "content": self._show(result.observation)}
        return StepResult([observation], done=False)

    def reward(self, episode: Episode) -> float | None:
        self._close(episode)
        if self.reward_mode == "none":
            return None
        given = episode.state["rewards"]  # the reset's, then each step's
        if episode.state["steps"] == 0 and episode.truncated:  # cut before its first turn reached the server
            return 0.0
        if all(r is None for r in given):
            if self.missing_reward == "zero":
                return 0.0
            raise OpenEnvError(
                f"OpenEnv server {self.base_url} gave episode {episode.record.get('id')!r} no reward (its "
                f"reset and {episode.state['steps']} step(s), none with a reward); a group takes its rewards "
                "from one source. Set missing_reward: zero to score such "
                "episodes 0, or reward: none to score every episode with the configured reward function"
            )
        rewards = [0.0 if r is None else float(r) for r in given]
        return sum(rewards) if self.reward_mode == "sum" else rewards[-1]

    def close(self) -> None:
        """Closes every session this environment still has open (e.g. of a rollout stopped by an error)."""
        with self._lock:
            clients = list(self._sessions.values())
        for client in clients:
            self._discard(client)

    # ---- tool actions ------------------------------------------------------------------------------
    def _list_tools(self, client) -> list[dict]:
        result = self._call(client, "list_tools", lambda: client.step({"type": "list_tools"}))
        tools = result.observation.get("tools") if isinstance(result.observation, dict) else None
        require(isinstance(tools, list) and tools,
                f"OpenEnv server {self.base_url} listed no MCP tools (its list_tools answer was "
                f"{json.dumps(result.observation, default=str)[:200]}); actions: tools needs an MCP "
                "environment (openenv.core.env_server.mcp_environment.MCPEnvironment) served with "
                "CallToolAction; use actions: text for a server whose action is a text field")
        return [{"type": "function",
                 "function": {"name": t["name"], "description": t.get("description") or "",
                              "parameters": t.get("input_schema") or _no_arguments()}}
                for t in tools]

    def _tool_step(self, episode: Episode, text: str) -> StepResult:
        calls = parse_tool_calls(text, self.call_format, self.call_tags)
        if not calls:
            self._close(episode)
            return StepResult(observations=[], done=True)
        observations, done = [], False
        for index, call in enumerate(calls):
            if done:
                break
            episode.tool_calls += 1
            schema = episode.state["schemas"].get(call.name) if call.error is None else None
            if call.error is not None:
                problem = call.error
            elif schema is None:
                problem = f"unknown tool {call.name!r}; the tools are {sorted(episode.state['schemas'])}"
            else:
                problem = check_arguments(call.arguments, schema)
            if index >= self.max_calls_per_turn:
                problem = f"at most {self.max_calls_per_turn} tool calls are run per turn"
            if problem:
                episode.tool_errors += 1
                content = f"error: {problem}"
            else:
                result, failure = self._send(episode, {"type": "call_tool", "tool_name": call.name,
                                                       "arguments": call.arguments})
                if failure is not None:
                    content = (f"error: tool {call.name!r} failed: {failure}; a new session, reset, serves "
                               "the next call")
                else:
                    content = self._tool_result(episode, call.name, result.observation)
                    done = bool(result.done)
            observations.append({"role": "tool", "name": call.name or "unknown", "content": content})
        if done:  # the server ended the episode: no turn follows, so no observation is shown
            self._close(episode)
            return StepResult(observations=[], done=True)
        return StepResult(observations=observations, done=False)

    def _tool_result(self, episode: Episode, name: str, observation: Any) -> str:
        error = observation.get("error") if isinstance(observation, dict) else None
        result = observation.get("result") if isinstance(observation, dict) else observation
        if error:
            episode.tool_errors += 1
            message = error.get("message", error) if isinstance(error, dict) else error
            return f"error: tool {name!r} failed: {message}"
        text, failed = result_text(result)
        if failed:
            episode.tool_errors += 1
            text = f"error: tool {name!r} failed: {text}"
        return cut_result(text, self.max_result_chars)

    # ---- sessions ----------------------------------------------------------------------------------
    def _connect(self):
        try:
            from openenv.core import GenericEnvClient
        except ImportError:
            raise ImportError(INSTALL_HINT) from None
        client = GenericEnvClient(base_url=self.base_url, connect_timeout_s=self.connect_timeout_s,
                                  message_timeout_s=self.message_timeout_s).sync()
        with self._lock:
            self._sessions[id(client)] = client
        self._call(client, "connect", client.connect)
        return client

    def _own(self, episode: Episode, client, again: bool = False) -> None:
        """The episode holds ``client`` from here: closed at its end, or when it is garbage-collected;
        ``again``: a session opened in place of one the server failed (bounded by max_restarts)."""
        finalizer = episode.state.get("finalizer")
        if finalizer is not None:
            finalizer.detach()
        finalizer = weakref.finalize(episode, in_background, self._discard, client)
        finalizer.atexit = False  # the process's sockets close with it
        episode.state.update(client=client, finalizer=finalizer, again=again, answered=False)

    def _session(self, episode: Episode):
        """The episode's session: a new one, reset, where the server failed the last one (bounded)."""
        client = episode.state["client"]
        if client is not None:
            return client
        with self._lock:
            if self._futile >= self.max_restarts:
                raise OpenEnvError(
                    f"OpenEnv server {self.base_url} failed each of the last {self._futile} new session(s) "
                    f"before it answered a step (the last failure: {self._last_failure}); check the server "
                    "(its log says why), or raise max_restarts"
                )
        client = self._connect()
        try:
            result = self._call(client, "reset", lambda: client.reset())
        except BaseException:
            self._discard(client)
            raise
        self._own(episode, client, again=True)
        episode.state["rewards"].append(result.reward)
        return client

    def _send(self, episode: Episode, action: dict) -> tuple[Any, str | None]:
        """(the server's answer to ``action``, None), or (None, how the server failed the step), counted on
        ``episode``, whose session is closed: its next step opens a new one (the module docstring)."""
        client = self._session(episode)
        try:
            result = client.step(action)
        except Exception as err:
            if isinstance(err, RuntimeError) and str(err).startswith("Server error"):
                raise self._failure(client, "step", err) from err  # the server's own answer: stop the run
            self._discard(client)
            if isinstance(err, TimeoutError | asyncio.TimeoutError):
                episode.tool_timeouts += 1
                why = f"did not answer the step in {self.message_timeout_s:g} s (message_timeout_s)"
            else:
                episode.tool_errors += 1
                why = f"failed the step ({type(err).__name__}: {err})"
            with self._lock:
                self._last_failure = why
                self._futile += episode.state["again"] and not episode.state["answered"]
            episode.state["client"] = None
            return None, f"the OpenEnv server {why}"
        with self._lock:
            self._futile = 0
        episode.state["answered"] = True
        episode.state["rewards"].append(result.reward)
        episode.state["steps"] += 1
        return result, None

    def _call(self, client, what: str, call):
        try:
            return call()
        except Exception as err:
            raise self._failure(client, what, err) from err

    def _failure(self, client, what: str, err: Exception) -> OpenEnvError:
        """The error that stops the run for a ``what`` of ``client`` that failed with ``err`` (the session is
        closed)."""
        pending = _pending_error(client)
        self._discard(client)
        if "CAPACITY_REACHED" in f"{pending} {err}":
            return OpenEnvError(
                f"OpenEnv server {self.base_url} is at its session limit ({pending or err}). Each "
                "episode holds one session from its reset to its end, so the server must allow as many "
                "concurrent sessions as episodes run at once (prompts per step x group size on each "
                "rank, and the held-out batch x its samples): raise max_concurrent_envs in the server's "
                "create_app(...) (its environment must set SUPPORTS_CONCURRENT_SESSIONS = True), or run "
                "fewer episodes at once"
            )
        return OpenEnvError(
            f"OpenEnv server {self.base_url}: {what} failed ({type(err).__name__}: {err}"
            f"{'; the server said: ' + pending if pending else ''}); check that the server runs and "
            "allows as many concurrent sessions as episodes run at once (max_concurrent_envs)"
        )

    def _discard(self, client) -> None:
        """Closes ``client`` (once; a broken session's close errors are moot) and forgets it."""
        with self._lock:
            if self._sessions.pop(id(client), None) is None:
                return
        try:
            client.close()
        except Exception:  # the session is already broken; the error that got here says why
            pass

    def _close(self, episode: Episode) -> None:
        client = episode.state.pop("client", None)
        finalizer = episode.state.pop("finalizer", None)
        if finalizer is not None:
            finalizer.detach()
        if client is not None:
            self._discard(client)

    def _show(self, observation: Any) -> str:
        if self.observation_field is None or self.actions == "tools":
            return observation if isinstance(observation, str) else json.dumps(observation, default=str)
        require(isinstance(observation, dict) and self.observation_field in observation,
                f"OpenEnvEnvironment: the observation has no field {self.observation_field!r}; its "
                "fields are "
                f"{sorted(observation) if isinstance(observation, dict) else type(observation).__name__}. "
                "Set observation_field to one of them (or null for the whole observation)")
        return str(observation[self.observation_field])

    def __getstate__(self) -> dict:  # open sessions and the lock stay with this process
        state = dict(self.__dict__)
        state["_sessions"], state["_lock"] = {}, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _pending_error(client) -> str:
    """A message the server sent before closing the session (e.g. its capacity error), read best-effort: the
    client reports only that the connection closed when the server refused it after accepting it."""
    ws = getattr(getattr(client, "async_client", None), "_ws", None)
    run = getattr(client, "_run", None)
    if ws is None or run is None:
        return ""
    try:
        raw = run(asyncio.wait_for(ws.recv(), timeout=1.0))
        data = json.loads(raw).get("data", {})
        return f"{data.get('message', '')} (code: {data.get('code', 'UNKNOWN')})"
    except Exception:
        return ""


def _no_arguments() -> dict[str, Any]:
    """The input schema of a tool that takes no arguments (a new dict each time)."""
    return {"type": "object", "properties": {}}
