"""Isolated tools: a hard wall-clock limit (C code included), a memory limit, none of the trainer's state, workers
that die without taking the run along; and tool calls of different episodes running at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import lightning as L
import pytest

from lit_grpo.envs import (
    ConcurrentSteps,
    Environment,
    Episode,
    EpisodeEngine,
    StepResult,
    ToolEnvironment,
    run_episodes,
)
from lit_grpo.envs.base import user_messages
from lit_grpo.envs.tool_calls import ToolCall
from lit_grpo.types import SamplingParams
from tests.envs.scripted import PLAIN_TEMPLATE, ScriptedEngine, chat_tokenizer
from tests.envs.test_episode_training import HasDigitOne, Steps, chat_model  # noqa: F401 (a fixture)
from tests.envs.test_tool_env import leave
from tests.helpers import tiny_data, tiny_module, tiny_trainer

#: What the trainer's process holds and a tool must not see: set by the tests after the module is imported.
TRAINER_STATE: dict[str, str] = {}


def spin(n: int) -> str:
    """Sums a range in C: no Python code runs until it returns, so no signal handler can stop it.

    Args:
        n: How many numbers to add.
    """
    return str(sum(range(n)))


def echo(text: str) -> str:
    """Repeat a text.

    Args:
        text: The text.
    """
    return text


def hoard(mb: int) -> str:
    """Allocates memory.

    Args:
        mb: Megabytes to allocate.
    """
    return str(len(bytearray(mb * 2**20)))


def crash(code: int) -> str:
    """Ends its process at once, as a crash in C code would.

    Args:
        code: The exit status.
    """
    os._exit(code)


def peek(key: str) -> str:
    """What the module's state holds under a key.

    Args:
        key: The key.
    """
    return TRAINER_STATE.get(key, "absent")


def pid() -> int:
    """The id of the process the tool runs in."""
    return os.getpid()


def rendezvous(folder: str, parties: int) -> str:
    """Waits until ``parties`` calls have arrived in a folder (each leaves a file): they run at once or never meet.

    Args:
        folder: The meeting folder.
        parties: How many calls must arrive.
    """
    Path(folder, str(os.getpid()) + "-" + str(time.monotonic_ns())).touch()
    deadline = time.monotonic() + 60
    while len(os.listdir(folder)) < parties and time.monotonic() < deadline:
        time.sleep(0.01)
    return "met" if len(os.listdir(folder)) >= parties else "alone"


async def arendezvous(folder: str, parties: int) -> str:
    """Async :func:`rendezvous`.

    Args:
        folder: The meeting folder.
        parties: How many calls must arrive.
    """
    Path(folder, str(time.monotonic_ns())).touch()
    for _ in range(6000):
        if len(os.listdir(folder)) >= parties:
            return "met"
        await asyncio.sleep(0.01)
    return "alone"


TOOLS = [spin, echo, hoard, leave, crash, peek, pid, rendezvous, arendezvous]
RECORD = {"prompt": "Q", "reference": "", "id": "0", "columns": {}}


def _call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_a_tool_spinning_in_c_is_killed_at_its_limit_and_the_episode_goes_on():
    env = ToolEnvironment(tools=TOOLS, timeout_s=1.0, workers=1)
    episode = env.reset(RECORD)
    assert env.call(episode, ToolCall("echo", {"text": "warm"})) == "warm"  # the worker is up: its start is not timed
    start = time.monotonic()
    answer = env.call(episode, ToolCall("spin", {"n": 10**12}))  # minutes of C: only a kill stops it
    elapsed = time.monotonic() - start
    assert answer == "error: tool 'spin' ran past its time limit of 1 s"
    assert elapsed < 1.0 + 1.0, f"the call took {elapsed:.1f} s; the limit is 1 s"
    result = env.step(episode, _call("echo", text="still here"))  # a fresh worker answers the next call
    assert [o["content"] for o in result.observations] == ["still here"] and not result.done
    assert (episode.tool_calls, episode.tool_errors, episode.tool_timeouts) == (1, 0, 1)
    assert env._pool.started == 2
    env.close()


@pytest.mark.parametrize("text, message", [
    (_call("leave", code=3), "failed: SystemExit: 3"),
    (_call("crash", code=7), "failed: its worker process ended (exit code 7)"),
])
def test_a_tool_that_exits_its_process_is_an_error_observation(text, message):
    env = ToolEnvironment(tools=TOOLS, workers=1)
    episode = env.reset(RECORD)
    result = env.step(episode, text + _call("echo", text="still here"))
    contents = [o["content"] for o in result.observations]
    assert contents[0].startswith("error: tool ") and message in contents[0] and contents[1] == "still here"
    assert (episode.tool_calls, episode.tool_errors, episode.tool_timeouts) == (2, 1, 0)
    env.close()


def test_a_worker_killed_between_calls_is_replaced():
    env = ToolEnvironment(tools=TOOLS, workers=1)
    episode = env.reset(RECORD)
    first = int(env.call(episode, ToolCall("pid", {})))
    os.kill(first, signal.SIGKILL)
    second = int(env.call(episode, ToolCall("pid", {})))
    assert second != first and second != os.getpid() and episode.tool_errors == 0
    env.close()


def test_memory_past_the_limit_is_a_memory_error_and_the_worker_goes_on():
    env = ToolEnvironment(tools=TOOLS, workers=1, memory_mb=256)
    episode = env.reset(RECORD)
    assert env.call(episode, ToolCall("hoard", {"mb": 64})) == str(64 * 2**20)
    answer = env.call(episode, ToolCall("hoard", {"mb": 4096}))
    assert answer.startswith("error: tool 'hoard' failed: MemoryError") and "memory_mb=256" in answer
    assert env.call(episode, ToolCall("hoard", {"mb": 64})) == str(64 * 2**20)
    assert env._pool.started == 1  # the same worker answered all three
    env.close()


@pytest.mark.parametrize("isolation, seen", [("process", "absent"), ("none", "trainer")])
def test_an_isolated_tool_does_not_see_the_trainers_state(isolation, seen):
    TRAINER_STATE["secret"] = "trainer"
    try:
        env = ToolEnvironment(tools=TOOLS, isolation=isolation)
        episode = env.reset(RECORD)
        assert env.call(episode, ToolCall("peek", {"key": "secret"})) == seen
        assert (int(env.call(episode, ToolCall("pid", {}))) == os.getpid()) == (isolation == "none")
        env.close()
    finally:
        TRAINER_STATE.clear()


def test_a_tool_that_cannot_reach_a_worker_is_a_clear_error():
    def local(x: int) -> str:
        """A closure.

        Args:
            x: Anything.
        """
        return str(x)

    with pytest.raises(ValueError, match="module level.*isolation: none"):
        ToolEnvironment(tools=[local])
    assert ToolEnvironment(tools=[local], isolation="none").call(None, ToolCall("local", {"x": 2})) == "2"


@pytest.mark.parametrize("tool, isolation", [("rendezvous", "process"), ("arendezvous", "none"),
                                             ("arendezvous", "process")])
def test_the_tool_calls_of_different_episodes_run_at_once(tmp_path, tool, isolation):
    """Four episodes each call a tool that returns "met" only once all four calls are running: run one after the
    other, the first would wait alone."""
    turns = [_call(tool, folder=str(tmp_path), parties=4), "done"]

    def respond(prompt, k):
        return turns[prompt.count("<|assistant|>") - 1] + "<eos>"

    tok = chat_tokenizer(PLAIN_TEMPLATE)
    env = ToolEnvironment(tools=TOOLS, isolation=isolation, workers=4, timeout_s=60.0)  # workers start unevenly
    r = run_episodes(ScriptedEngine(tok, respond), tok, [RECORD], env, n=4,
                     sampling=SamplingParams(max_new_tokens=200), max_turns=2)
    results = [m["content"] for ep in r.episodes for m in ep.messages if m["role"] == "tool"]
    assert results == ["met"] * 4 and all(ep.done for ep in r.episodes)
    env.close()


class CallsExitingTools(ToolEnvironment):
    """Whatever the policy writes in its first turn, calls tools that exit their process; later turns answer.
    The prompt is the question alone (the tiny policy's context has no room for tool descriptions)."""

    def reset(self, record):
        return Episode(record=record, messages=user_messages(record))

    async def astep(self, episode, text):
        if episode.turns == 1:
            text = _call("leave", code=3) + _call("crash", code=7) + _call("echo", text="1")
        return await super().astep(episode, text)


def test_training_goes_on_past_tools_that_exit(chat_model, tmp_path):  # noqa: F811 (the fixture)
    L.seed_everything(0)
    steps = Steps()
    env = CallsExitingTools(tools=[leave, crash, echo], workers=2)
    module = tiny_module(chat_model, engine=EpisodeEngine(env, max_turns=2), reward=HasDigitOne(), max_new_tokens=6)
    trainer = tiny_trainer(tmp_path, max_steps=2, callbacks=[steps])
    trainer.fit(module, datamodule=tiny_data())
    assert trainer.global_step == 2 and len(steps.outputs) == 2
    episodes = [ep for s in steps.outputs for ep in s.rollouts.episodes]
    called = [ep for ep in episodes if ep.tool_calls]
    assert called and all(ep.tool_errors == 2 for ep in called)  # sys.exit and os._exit, each an error observation
    for ep in called:
        results = [m["content"] for m in ep.messages if m["role"] == "tool"] or [ep.messages[-1]["content"]]
        # how the worker ended is test_a_tool_that_exits_its_process_is_an_error_observation's to check
        assert "SystemExit: 3" in "".join(results) and "its worker process ended" in "".join(results)
    env.close()


class Meeting(Environment):
    """A sync environment whose first step returns only once ``parties`` steps are running (a barrier)."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=60)

    def reset(self, record):
        return Episode(record=record, messages=user_messages(record))

    def step(self, episode, text):
        if episode.turns > 1:
            return StepResult([], done=True)
        try:
            self.barrier.wait()
            said = "met"
        except threading.BrokenBarrierError:
            said = "alone"
        return StepResult([{"role": "user", "content": said}], done=False)


def test_concurrent_steps_run_a_sync_environments_steps_side_by_side():
    def respond(prompt, k):
        return "hello<eos>"

    tok = chat_tokenizer(PLAIN_TEMPLATE)
    env = ConcurrentSteps(Meeting(parties=4), workers=4)
    r = run_episodes(ScriptedEngine(tok, respond), tok, [RECORD], env, n=4,
                     sampling=SamplingParams(max_new_tokens=200), max_turns=2)
    assert [ep.messages[2]["content"] for ep in r.episodes] == ["met"] * 4 and all(ep.done for ep in r.episodes)
    with pytest.raises(ValueError, match="not an Environment"):
        ConcurrentSteps(object())


def test_a_tool_of_an_interactive_session_is_a_clear_error(monkeypatch):
    main = type(sys)("__main__")  # a notebook's or a REPL's __main__: no file a worker could import
    monkeypatch.setitem(sys.modules, "__main__", main)

    def typed(x: int) -> str:
        """Typed in a notebook.

        Args:
            x: Anything.
        """
        return str(x)

    typed.__module__ = "__main__"
    with pytest.raises(ValueError, match="interactive session.*isolation: none"):
        ToolEnvironment(tools=[typed])
