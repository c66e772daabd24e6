"""The tool environment: schemas, call formats, every bad call answered and counted, never fatal."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Literal

import pytest

from lit_grpo.envs import episode_metrics, run_episodes
from lit_grpo.envs.calculator import calculator
from lit_grpo.envs.tool_calls import parse_tool_calls
from lit_grpo.envs.tools import DEFAULT_TIMEOUT_S, ToolEnvironment
from lit_grpo.types import SamplingParams
from tests.envs.scripted import PLAIN_TEMPLATE, TOOL_TEMPLATE, ScriptedEngine, chat_tokenizer


def echo(text: str, times: int = 1) -> str:
    """Repeat a text.

    Args:
        text: The text.
        times: How often.
    """
    return text * times


def broken(x: int) -> str:
    """Always raises.

    Args:
        x: Anything.
    """
    raise RuntimeError(f"broke on {x}")


def as_dict(x: int) -> dict:
    """Returns a dict.

    Args:
        x: Anything.
    """
    return {"x": x}


def as_number(x: int) -> float:
    """Returns a number.

    Args:
        x: Anything.
    """
    return x / 4


def slow(seconds: float) -> str:
    """Sleeps.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return "woke"


def pick(colour: Literal["red", "blue"], count: int | None = None) -> str:
    """Pick a colour.

    Args:
        colour: The colour.
        count: How many (optional, may be null).
    """
    return f"{colour} x{count}"


async def shout(text: str, pause: float = 0.0) -> str:
    """Repeat a text loudly, after a pause (an async tool).

    Args:
        text: The text.
        pause: Seconds to wait first.
    """
    await asyncio.sleep(pause)
    return text.upper()


def leave(code: int) -> str:
    """Calls sys.exit.

    Args:
        code: The exit status.
    """
    sys.exit(code)


def interrupt(x: int) -> str:
    """Raises KeyboardInterrupt itself.

    Args:
        x: Anything.
    """
    raise KeyboardInterrupt(f"interrupted on {x}")


TOOLS = [echo, broken, as_dict, as_number, slow, pick, calculator, shout, leave, interrupt]


def _env(**kwargs):
    return ToolEnvironment(tools=TOOLS, timeout_s=0.3, **kwargs)


@pytest.fixture(params=["process", "none"])
def isolation(request) -> str:
    """Both ways of running tools: in worker processes (the default) and in the trainer's process."""
    return request.param


def _call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _step(env, text):
    episode = env.reset({"prompt": "Q", "reference": "", "id": "0", "columns": {}})
    return episode, env.step(episode, text)


def test_schemas_come_from_hints_and_docstrings():
    env = _env()
    schema = next(s for s in env.schemas if s["function"]["name"] == "echo")["function"]
    assert schema["parameters"]["properties"] == {"text": {"type": "string", "description": "The text."},
                                                  "times": {"type": "integer", "description": "How often."}}
    assert schema["parameters"]["required"] == ["text"]
    assert DEFAULT_TIMEOUT_S == ToolEnvironment(tools=[echo]).timeout_s == 5.0


def test_tool_without_docstring_is_a_clear_error():
    def bare(x):
        return x
    with pytest.raises(ValueError, match="type hint"):
        ToolEnvironment(tools=[bare])


def test_call_formats():
    qwen = parse_tool_calls('I will add. <tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}\n'
                            '</tool_call>')
    llama = parse_tool_calls('{"name": "calculator", "parameters": {"expression": "1+1"}}')
    custom = parse_tool_calls('<call>{"name": "calculator", "arguments": {"expression": "1+1"}}</call>',
                              "tags", ("<call>", "</call>"))
    for calls in (qwen, llama, custom):
        assert [(c.name, c.arguments, c.error) for c in calls] == [("calculator", {"expression": "1+1"}, None)]
    assert parse_tool_calls("The answer is 4.") == []
    assert parse_tool_calls('{"answer": 4}') == []  # a JSON answer is not a call in auto mode
    assert parse_tool_calls('{"name": "x"}', "tags") == []


def test_good_calls_answer_in_the_tool_role_and_continue(isolation):
    env = _env(isolation=isolation)
    episode, result = _step(env, "Let me. " + _call("echo", text="ab", times=2) + _call("calculator", expression="6*7"))
    assert not result.done and [o["content"] for o in result.observations] == ["abab", "42"]
    assert all(o["role"] == "tool" for o in result.observations)
    assert (episode.tool_calls, episode.tool_errors, episode.tool_timeouts) == (2, 0, 0)
    _, final = _step(env, "The answer is 42.")
    assert final.done and final.observations == []


@pytest.mark.parametrize("text, message", [
    ("<tool_call>{not json</tool_call>", "not valid JSON"),
    ('<tool_call>["calculator"]</tool_call>', "JSON object"),
    ('<tool_call>{"name": "calculator", "arguments": [1]}</tool_call>', "must be a JSON object"),
    (_call("rm_rf", path="/"), "unknown tool 'rm_rf'"),
    (_call("echo"), "missing argument"),
    (_call("echo", text="a", sudo=True), "unknown argument"),
    (_call("echo", text=3), "must be string"),
    (_call("echo", text="a", times=True), "must be integer"),
    (_call("broken", x=1), "RuntimeError: broke on 1"),
    (_call("as_dict", x=1), "returned dict"),
    (_call("calculator", expression="__import__('os').system('x')"), "Call is not allowed"),
    (_call("pick", colour="green"), "must be one of ['red', 'blue']"),
    (_call("pick", colour="red", count="2"), "must be integer"),
])
def test_bad_calls_are_error_observations_and_counted(text, message, isolation):
    episode, result = _step(_env(isolation=isolation), text)
    assert not result.done and len(result.observations) == 1
    content = result.observations[0]["content"]
    assert content.startswith("error: ") and message in content
    assert (episode.tool_calls, episode.tool_errors, episode.tool_timeouts) == (1, 1, 0)


def test_async_tools_are_awaited(isolation):
    episode, result = _step(_env(isolation=isolation), _call("shout", text="ab") + _call("shout", text="cd", pause=0.01))
    assert [o["content"] for o in result.observations] == ["AB", "CD"]
    assert (episode.tool_calls, episode.tool_errors) == (2, 0)


def test_an_async_tool_past_its_limit_is_a_timeout(isolation):
    episode, result = _step(_env(isolation=isolation), _call("shout", text="ab", pause=30.0))
    assert "time limit of 0.3 s" in result.observations[0]["content"]
    assert (episode.tool_calls, episode.tool_errors, episode.tool_timeouts) == (1, 0, 1)


@pytest.mark.parametrize("text, message", [
    (_call("leave", code=3), "SystemExit: 3"),
    (_call("interrupt", x=1), "KeyboardInterrupt: interrupted on 1"),
])
def test_a_tool_that_exits_or_interrupts_is_an_error_observation(text, message, isolation):
    episode, result = _step(_env(isolation=isolation), text + _call("echo", text="still here"))
    assert not result.done and [o["content"] for o in result.observations][1] == "still here"
    assert result.observations[0]["content"].startswith("error: ") and message in result.observations[0]["content"]
    assert (episode.tool_calls, episode.tool_errors) == (2, 1)


def test_optional_and_enum_arguments():
    episode, result = _step(_env(), _call("pick", colour="red", count=None) + _call("pick", colour="blue", count=2))
    assert [o["content"] for o in result.observations] == ["red xNone", "blue x2"] and episode.tool_errors == 0


def test_numbers_are_converted_and_long_results_cut():
    episode, result = _step(_env(max_result_chars=5), _call("as_number", x=3) + _call("echo", text="abcdefgh"))
    assert result.observations[0]["content"] == "0.75"
    assert result.observations[1]["content"].startswith("abcde\n[result cut at 5 characters]")
    assert episode.tool_errors == 0


def test_timeout_is_an_observation_and_counted(isolation):
    start = time.perf_counter()
    episode, result = _step(_env(isolation=isolation), _call("slow", seconds=30.0))
    assert time.perf_counter() - start < 10
    assert "time limit of 0.3 s" in result.observations[0]["content"]
    assert (episode.tool_calls, episode.tool_errors, episode.tool_timeouts) == (1, 0, 1)


def test_calls_beyond_the_limit_per_turn_are_refused():
    episode, result = _step(_env(max_calls_per_turn=2), _call("echo", text="a") * 3)
    assert [o["content"][:6] for o in result.observations] == ["a", "a", "error:"]
    assert (episode.tool_calls, episode.tool_errors) == (3, 1)


@pytest.mark.parametrize("template", [TOOL_TEMPLATE, PLAIN_TEMPLATE])
def test_bad_calls_in_episodes_are_counted_and_not_fatal(template):
    turns = [_call("nope", x=1), "<tool_call>{bad</tool_call>", _call("slow", seconds=30.0),
             _call("calculator", expression="6*7"), "42"]

    def respond(prompt, k):
        return turns[prompt.count("<|assistant|>") - 1] + "<eos>"

    tok = chat_tokenizer(template)
    env = _env()
    r = run_episodes(ScriptedEngine(tok, respond), tok, [{"prompt": "6*7?", "reference": "42", "id": "0",
                                                           "columns": {}}], env, n=1,
                     sampling=SamplingParams(max_new_tokens=200), max_turns=6)
    ep = r.episodes[0]
    assert ep.done and not ep.truncated and r.texts == ["42"] and ep.turns == 5
    assert episode_metrics(r.episodes) | {"env/seconds": 0} == {
        "env/turns_mean": 5.0, "env/tool_calls_mean": 4.0, "env/truncated_frac": 0.0, "env/unanswered_frac": 0.0,
        "env/seconds": 0,
        "env/tool_errors": 2.0, "env/tool_timeouts": 1.0, "env/observations_cut": 0.0,
        "env/context_exhausted_frac": 0.0}
    tool_results = [m for m in ep.messages if m["role"] == "tool"]
    assert [m["content"][:6] for m in tool_results] == ["error:"] * 3 + ["42"]
    prompt = tok.decode(r.prompt_ids[0][r.prompt_mask[0]])
    if template == TOOL_TEMPLATE:  # the template renders the schemas; results keep the tool role
        assert prompt.startswith("<|system|>tools:echo;broken;")
        assert "<|tool|>42<eos>" in tok.decode(r.completion_ids[0])
    else:  # no tool format: instructions in a system message, results wrapped in user messages
        assert prompt.startswith("<|system|>You can call these tools") and '"name": "calculator"' in prompt
        assert "<|user|><tool_response>\n42\n</tool_response><eos>" in tok.decode(r.completion_ids[0])


def _hostile_turns(count: int = 200) -> list[str]:
    """Turns a policy could sample: deep nesting, huge numbers, broken JSON, stray tags, noise (a fixed seed)."""
    import random

    rng = random.Random(0)
    pieces = ["[", "]", "{", "}", '"', ":", ",", "9" * 5000, "1e999", "-", "null", "\\u0000", "\\ud800",
              '"name"', '"arguments"', '"calculator"', '"expression"', "<tool_call>", "</tool_call>", " ", "\n"]
    turns = [_call("calculator", expression="1" + "+1" * 5000), "<tool_call>" + "[" * 1000 + "</tool_call>",
             "<tool_call>" + "[" * 1000 + "]" * 1000 + "</tool_call>",
             '<tool_call>{"name": "calculator", "arguments": {"expression": ' + "9" * 5000 + "}}</tool_call>",
             '<tool_call>{"name": "echo", "arguments": {"text": ' + "[" * 900 + "]" * 900 + "}}</tool_call>",
             '<tool_call>{"name": "calculator", "arguments": "' + "[" * 1000 + '"}</tool_call>',
             "{" * 2000, '{"name": "echo", "parameters": ' + "{" * 1000]
    turns += ["<tool_call>" + "".join(rng.choice(pieces) for _ in range(rng.randint(1, 60))) + "</tool_call>"
              for _ in range(count)]
    return turns


@pytest.mark.parametrize("call_format", ["auto", "tags", "json"])
def test_whatever_the_policy_samples_ends_as_an_answer_or_a_counted_error(call_format):
    env = ToolEnvironment(tools=TOOLS, timeout_s=2.0, isolation="none", call_format=call_format)
    for text in _hostile_turns():
        episode, result = _step(env, text)  # never an exception out of the episode
        for message in result.observations:
            assert isinstance(message["content"], str) and len(message["content"]) < 10_000
        assert episode.tool_errors <= episode.tool_calls
