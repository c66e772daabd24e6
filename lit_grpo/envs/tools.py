"""Tool use: plain Python callables offered to the policy, called from its turns, answered as observations.

Each tool is a function (or bound method) with type hints and a Google-style docstring; its JSON schema comes from
``transformers.utils.get_json_schema``. An assistant turn calls tools in one of the formats of
:func:`lit_grpo.envs.tool_calls.parse_tool_calls`; a turn without a call is the final answer and ends the episode.
Every call gets one ``tool`` message back: the result, or an error message when the call is malformed, names an
unknown tool, has missing, extra or mistyped arguments, raises, returns something other than text or a number, or
runs past ``timeout_s``. Errors are counted on the episode (``tool_errors``, ``tool_timeouts``) and the episode goes
on: no tool failure stops the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from transformers.utils import get_json_schema

from lit_grpo.checks import require
from lit_grpo.envs.base import Environment, Episode, Record, StepResult, user_messages
from lit_grpo.envs.tool_calls import ToolCall, check_arguments, parse_tool_calls
from lit_grpo.rewards.scoring import RewardTimeout, time_limit

DEFAULT_TIMEOUT_S = 5.0


def tool_schema(tool: Callable[..., Any]) -> dict:
    """The JSON schema of ``tool`` (type hints and docstring), with a clear error when they are missing."""
    try:
        return get_json_schema(tool)
    except Exception as err:
        name = getattr(tool, "__name__", type(tool).__name__)
        raise ValueError(
            f"tool {name!r} has no usable JSON schema ({err}); give every argument a type hint and describe it "
            "in a Google-style docstring (Args: name: description)"
        ) from None


def describe_tools(schemas: list[dict], tags: tuple[str, str]) -> str:
    """Tool instructions for chat templates without a tool format: the schemas and the call format."""
    opening, closing = tags
    listing = "\n".join(json.dumps(s["function"]) for s in schemas)
    return (
        "You can call these tools (JSON schemas):\n"
        f"{listing}\n"
        f'To call a tool, write {opening}{{"name": "<tool name>", "arguments": {{<arguments>}}}}{closing} and '
        "stop; the result comes back in the next message. When you know the answer, reply without a tool call."
    )


class ToolEnvironment(Environment):
    """The policy may call tools in its turns; a turn without a tool call is its final answer.

    Args:
        tools: The tools: functions (or their import paths, e.g. ``lit_grpo.envs.calculator.calculator``) with
            type hints and a docstring describing every argument.
        system_prompt: A system message before the prompt (null: none). Where the chat template has no tool
            format, the tool descriptions and the call format are added to it.
        call_format: ``tags``: calls inside ``call_tags`` holding ``{"name", "arguments"}`` JSON (Qwen2.5/3 and
            the default for templates without a tool format); ``json``: the whole turn is one
            ``{"name", "parameters"}`` object (Llama 3.x); ``auto``: tags, else a whole-turn JSON call.
        call_tags: Opening and closing tag of a call in the ``tags`` format.
        timeout_s: Wall-clock seconds a tool call may run (enforced in the main thread, where training steps run;
            see :func:`lit_grpo.rewards.scoring.time_limit`).
        max_calls_per_turn: Calls run per turn; further calls in the same turn get an error observation.
        max_result_chars: Longest observation; longer results are cut, saying so.
    """

    def __init__(self, tools: list[Callable[..., Any]] | None = None, system_prompt: str | None = None,
                 call_format: Literal["auto", "tags", "json"] = "auto",
                 call_tags: tuple[str, str] = ("<tool_call>", "</tool_call>"),
                 timeout_s: float = DEFAULT_TIMEOUT_S, max_calls_per_turn: int = 4,
                 max_result_chars: int = 2000) -> None:
        require(call_format in ("auto", "tags", "json"), f"call_format={call_format!r}; use auto, tags or json")
        require(timeout_s > 0, f"timeout_s={timeout_s} must be > 0")
        require(max_calls_per_turn >= 1, f"max_calls_per_turn={max_calls_per_turn} must be >= 1")
        require(max_result_chars >= 1, f"max_result_chars={max_result_chars} must be >= 1")
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

    def own_tools(self) -> list[Callable[..., Any]]:
        """Tools a subclass always offers (bound methods, e.g. a search over its collection)."""
        return []

    def reset(self, record: Record) -> Episode:
        return Episode(record=record, messages=user_messages(record, self.system_prompt), tools=self.schemas,
                       tool_instructions=describe_tools(self.schemas, self.call_tags))

    def step(self, episode: Episode, text: str) -> StepResult:
        calls = parse_tool_calls(text, self.call_format, self.call_tags)
        if not calls:
            return StepResult(observations=[], done=True)
        observations = []
        for index, call in enumerate(calls):
            episode.tool_calls += 1
            if index >= self.max_calls_per_turn:
                result = self._error(episode, f"at most {self.max_calls_per_turn} tool calls are run per turn")
            else:
                result = self.call(episode, call)
            observations.append({"role": "tool", "name": call.name or "unknown", "content": result})
        return StepResult(observations=observations, done=False)

    def answers(self, episode: Episode, text: str) -> bool:
        """A turn without a tool call is the answer (checked without running anything)."""
        return not parse_tool_calls(text, self.call_format, self.call_tags)

    def call(self, episode: Episode, call: ToolCall) -> str:
        """The observation for one call (its result or an error message); counts errors on ``episode``."""
        if call.error:
            return self._error(episode, call.error)
        tool = self.tools.get(call.name)
        if tool is None:
            return self._error(episode, f"unknown tool {call.name!r}; the tools are {sorted(self.tools)}")
        problem = check_arguments(call.arguments, self._schema(call.name))
        if problem:
            return self._error(episode, f"tool {call.name!r}: {problem}")
        try:
            with time_limit(self.timeout_s, f"tool {call.name!r}"):
                value = tool(**call.arguments)
        except RewardTimeout:
            episode.tool_timeouts += 1
            return f"error: tool {call.name!r} ran past its time limit of {self.timeout_s:g} s"
        except Exception as err:
            return self._error(episode, f"tool {call.name!r} failed: {type(err).__name__}: {err}")
        return self._text(episode, call.name, value)

    def _schema(self, name: str) -> dict:
        return next(s for s in self.schemas if s["function"]["name"] == name)

    def _text(self, episode: Episode, name: str, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return self._error(episode, f"tool {name!r} returned {type(value).__name__}, not text or a number")
        text = value if isinstance(value, str) else repr(value)
        if len(text) > self.max_result_chars:
            text = text[: self.max_result_chars] + f"\n[result cut at {self.max_result_chars} characters]"
        return text

    @staticmethod
    def _error(episode: Episode, message: str) -> str:
        episode.tool_errors += 1
        return f"error: {message}"
