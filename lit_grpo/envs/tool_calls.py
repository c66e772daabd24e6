"""Tool calls read from an assistant turn, and their arguments checked against the tool's JSON schema.

Formats:

- ``tags`` (Qwen2.5/3's chat-template format, and the default for templates without one): each call is
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the tags are configurable);
- ``json`` (Llama 3.x's): the whole turn is one ``{"name": ..., "parameters": {...}}`` object, optionally
  after ``<|python_tag|>``;
- ``auto``: ``tags`` when the turn holds the opening tag, else ``json`` when the whole turn is such an object.

``arguments`` and ``parameters`` are accepted in both. A call that cannot be read is still returned, with its
``error`` set, so that the policy is told what was wrong.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from lit_grpo.checks import require

_JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
               "array": (list,), "object": (dict,), "null": (type(None),)}


@dataclass
class ToolCall:
    """One call: the tool's name and its arguments, or the reason it could not be read."""

    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def check_call_options(call_format: str, max_calls_per_turn: int, max_result_chars: int) -> None:
    """``require`` the options every tool-calling environment takes: how calls are read, how many a turn
    runs and how long a result may be."""
    require(call_format in ("auto", "tags", "json"), f"call_format={call_format!r}; use auto, tags or json")
    require(max_calls_per_turn >= 1, f"max_calls_per_turn={max_calls_per_turn} must be >= 1")
    require(max_result_chars >= 1, f"max_result_chars={max_result_chars} must be >= 1")


def cut_result(text: str, max_chars: int) -> str:
    """``text``, or its first ``max_chars`` characters and a line that says it was cut there."""
    if len(text) > max_chars:
        return text[:max_chars] + f"\n[result cut at {max_chars} characters]"
    return text


def parse_tool_calls(text: str, call_format: str = "auto",
                     tags: tuple[str, str] = ("<tool_call>", "</tool_call>")) -> list[ToolCall]:
    """The calls in the assistant turn ``text`` ([] when it makes none)."""
    opening, closing = tags
    if call_format in ("tags", "auto") and opening in text:
        pattern = re.escape(opening) + r"(.*?)(?:" + re.escape(closing) + r"|$)"
        return [_read(body) for body in re.findall(pattern, text, flags=re.DOTALL)]
    if call_format in ("json", "auto"):
        body = text.strip().removeprefix("<|python_tag|>").strip()
        if body.startswith("{") and body.endswith("}"):
            call = _read(body)
            if call_format == "json" or call.error is None:
                return [call]
    return []


def _read(body: str) -> ToolCall:
    """The call ``body`` holds: whatever the policy wrote, a call or its error, never an exception."""
    try:
        data = json.loads(body.strip())
    except json.JSONDecodeError as err:
        return ToolCall(None, error=f"the tool call is not valid JSON ({err.msg} at character {err.pos})")
    except (ValueError, RecursionError) as err:  # a number past Python's digit limit, nesting past the stack
        return ToolCall(None, error=f"the tool call cannot be read ({type(err).__name__}: {str(err)[:80]})")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return ToolCall(None, error='a tool call is a JSON object {"name": "<tool>", "arguments": {...}}')
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            pass
    if not isinstance(arguments, dict):
        return ToolCall(data["name"], error=f"the arguments of {data['name']!r} must be a JSON object")
    return ToolCall(data["name"], arguments)


def check_arguments(arguments: dict[str, Any], schema: dict) -> str | None:
    """What is wrong with ``arguments`` for the tool ``schema`` (missing, unknown or mistyped), or None."""
    parameters = schema["function"].get("parameters", {})
    properties = parameters.get("properties", {})
    missing = [name for name in parameters.get("required", []) if name not in arguments]
    if missing:
        return f"missing argument(s) {missing}; it takes {sorted(properties)}"
    extra = [name for name in arguments if name not in properties]
    if extra:
        return f"unknown argument(s) {extra}; it takes {sorted(properties)}"
    for name, value in arguments.items():
        problem = _check_value(name, value, properties[name])
        if problem:
            return problem
    return None


def _check_value(name: str, value: Any, spec: dict) -> str | None:
    """What is wrong with an argument's value for its schema ``spec`` (type, null, enum; not nested items)."""
    if value is None and spec.get("nullable"):
        return None
    kinds = spec.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    allowed = tuple(t for k in kinds for t in _JSON_TYPES.get(k, (object,)))
    wrong_bool = isinstance(value, bool) and "boolean" not in kinds
    if allowed and (wrong_bool or not isinstance(value, allowed)):
        return f"argument {name!r} must be {' or '.join(kinds)}, got {type(value).__name__} {_shown(value)}"
    if "enum" in spec and value not in spec["enum"]:
        return f"argument {name!r} must be one of {spec['enum']}, got {_shown(value)}"
    return None


def _shown(value: Any) -> str:
    """The first 40 characters of ``value``'s repr (a value too deep or too long to show: its type)."""
    try:
        return f"{value!r:.40}"
    except (ValueError, RecursionError):
        return f"<a {type(value).__name__} too large to show>"
