"""MCP tools as episode tools: a small stdio MCP server (tests/envs/mcp_server.py) listed and called through
MCPToolEnvironment, from a scripted policy and in two GRPO steps; errors, a dying server, a hung one, a malformed
reply, the calls of other episodes in flight when a shared server goes down, and the bound on restarts."""

from __future__ import annotations

import copy
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="needs the mcp extra: pip install 'lit-grpo[mcp]'")

from lit_grpo.envs import run_episodes  # noqa: E402
from lit_grpo.envs.mcp_tools import MCPServerError, MCPToolEnvironment  # noqa: E402
from lit_grpo.types import SamplingParams  # noqa: E402
from tests.envs.scripted import ScriptedEngine, chat_tokenizer  # noqa: E402

SERVER = str(Path(__file__).with_name("mcp_server.py"))
RAW_SERVER = str(Path(__file__).with_name("mcp_raw_server.py"))
RECORD = {"prompt": "What is 6 * 7?", "reference": "42", "id": "0", "columns": {}}


def tools_env(log: Path | None = None, **kwargs) -> MCPToolEnvironment:
    env = {"MCP_TEST_LOG": str(log)} if log is not None else None
    return MCPToolEnvironment(command=sys.executable, args=[SERVER], env=env, **kwargs)


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def scripted(turns: list[str]):
    """A policy that writes ``turns`` in order, whatever it is shown."""
    return lambda prompt, k: turns[prompt.count("<|assistant|>") - 1] + "<eos>"


def episode_of(env, turns: list[str], max_turns: int = 6):
    tok = chat_tokenizer()
    r = run_episodes(ScriptedEngine(tok, scripted(turns)), tok, [RECORD], env, n=1,
                     sampling=SamplingParams(max_new_tokens=200), max_turns=max_turns)
    return r, r.episodes[0], tok


def started(log: Path) -> list[int]:
    return [int(line.split()[0]) for line in log.read_text().splitlines() if line.endswith(" started")]


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def eventually(condition, limit_s: float = 60.0) -> bool:
    """Whether ``condition()`` holds within ``limit_s`` seconds (checked every 0.1 s)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture(scope="module")
def shared_env():
    env = tools_env()
    yield env
    env.close()


def test_the_server_tools_are_episode_tools(shared_env):
    r, ep, tok = episode_of(shared_env, [call("multiply", a=6, b=7), "42"])
    names = [t["function"]["name"] for t in ep.tools]
    assert names == ["multiply", "shout", "fail", "sleep", "die", "hold", "die_when"]
    multiply = ep.tools[0]
    assert multiply["type"] == "function"
    assert multiply["function"]["description"].startswith("Multiply two integers.")
    parameters = multiply["function"]["parameters"]
    assert parameters["required"] == ["a", "b"] and parameters["properties"]["a"]["type"] == "integer"
    assert "tools:multiply;shout;fail;sleep;die;hold;" in tok.decode(r.prompt_ids[0])  # the template renders them
    assert ep.messages[2] == {"role": "tool", "name": "multiply", "content": "42"}
    assert ep.done and ep.turns == 2 and ep.tool_calls == 1 and ep.tool_errors == 0 and ep.reward is None
    # without a tool format in the template, the same schemas are described in the system message
    assert json.dumps(multiply["function"]) in ep.tool_instructions


def test_a_subset_of_the_tools_and_an_unknown_name():
    env = tools_env(tools=["shout"])
    try:
        _, ep, _ = episode_of(env, [call("shout", text="hi") + call("multiply", a=1, b=2), "HI"])
        assert [t["function"]["name"] for t in ep.tools] == ["shout"]
        assert ep.messages[2]["content"] == "HI"
        assert ep.messages[3]["content"] == "error: unknown tool 'multiply'; the tools are ['shout']"
    finally:
        env.close()
    with pytest.raises(ValueError, match=r"tools \['nope'\] are not served by .*mcp_server.py"):
        tools_env(tools=["nope"]).reset(RECORD)


def test_bad_calls_and_failing_tools_are_error_observations(shared_env):
    _, ep, _ = episode_of(shared_env, [call("multiply", a="six", b=7) + call("fail", message="boom")
                                       + "<tool_call>{not json</tool_call>", "no idea"])
    first, second, third = (m["content"] for m in ep.messages[2:5])
    assert first == "error: tool 'multiply': argument 'a' must be integer, got str 'six'"
    assert second.startswith("error: tool 'fail' failed: ")
    assert third.startswith("error: the tool call is not valid JSON")
    assert ep.tool_calls == 3 and ep.tool_errors == 3 and ep.done


def test_a_server_that_dies_is_an_error_observation_and_is_started_again(tmp_path):
    log = tmp_path / "calls.log"
    env = tools_env(log)
    try:
        _, ep, _ = episode_of(env, [call("die"), call("multiply", a=2, b=3), "6"])
        assert ep.messages[2]["content"] == ("error: tool 'die' failed: the MCP server exited during the call; a "
                                             "new server serves the next call")
        assert ep.messages[4]["content"] == "6"  # a new server process answered
        assert ep.tool_errors == 1 and ep.done
        first, second = started(log)
        assert first != second and not running(first)
    finally:
        env.close()
    assert not running(started(log)[-1])


def test_a_hung_tool_times_out_and_its_server_is_stopped(tmp_path):
    log = tmp_path / "calls.log"
    env = tools_env(log, timeout_s=2.0)
    try:
        _, ep, _ = episode_of(env, [call("sleep", seconds=600), call("shout", text="again"), "AGAIN"])
        assert ep.messages[2]["content"] == "error: tool 'sleep' ran past its time limit of 2 s"
        assert ep.messages[4]["content"] == "AGAIN"
        assert ep.tool_timeouts == 1 and ep.tool_errors == 0 and ep.done
        hung, fresh = started(log)
        assert not running(hung) and running(fresh)
    finally:
        env.close()
    assert not running(started(log)[-1])


def test_a_malformed_reply_fails_its_call_at_once_and_a_stray_line_is_skipped(tmp_path):
    log = tmp_path / "calls.log"
    # a call that waited for its answer would wait 600 s and be a timeout
    env = MCPToolEnvironment(command=sys.executable, args=[RAW_SERVER], env={"MCP_TEST_LOG": str(log)},
                             timeout_s=600.0)
    try:
        _, ep, _ = episode_of(env, [call("noisy", text="heard") + call("garble"), call("shout", text="on"), "ON"])
        assert ep.messages[2]["content"] == "heard"  # a line without a request id is noise, not its reply
        garbled = ep.messages[3]["content"]
        assert garbled.startswith("error: tool 'garble' failed: the MCP server sent a malformed reply (")
        assert garbled.endswith("; a new server serves the next call")
        assert ep.messages[5]["content"] == "ON"  # a new server answered
        assert ep.tool_errors == 1 and ep.tool_timeouts == 0 and ep.done
        first, second = started(log)
        assert first != second and not running(first)  # the server that garbled is gone
    finally:
        env.close()


def _wait_line(log: Path, line: str, pids: int = 1) -> None:
    """Until ``line`` is logged by ``pids`` different server processes (a hang guard, not a time limit)."""
    def logged() -> int:
        text = log.read_text() if log.exists() else ""
        return len({row.split()[0] for row in text.splitlines() if row.split(" ", 1)[1] == line})

    assert eventually(lambda: logged() >= pids, 120), f"{line!r} was not logged by {pids} server(s)"


def _step_in_thread(env, episode, text: str):
    """``env.step(episode, text)`` in a thread (as ConcurrentSteps runs a rollout's episodes); its result and
    the thread."""
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("step", env.step(episode, text)), daemon=True)
    thread.start()
    return out, thread


def test_a_call_in_flight_when_a_shared_server_exits_is_asked_again_on_the_new_one(tmp_path):
    log, killer, release = tmp_path / "calls.log", tmp_path / "kill", tmp_path / "release"
    env = tools_env(log)
    try:
        dying, bystander = env.reset(RECORD), env.reset(RECORD)
        first_out, first = _step_in_thread(env, dying, call("die_when", path=str(killer)))
        _wait_line(log, f"die_when {killer}")
        second_out, second = _step_in_thread(env, bystander, call("hold", path=str(release)))
        _wait_line(log, f"hold {release}")
        (pid,) = started(log)
        killer.touch()  # the server exits with both calls in flight: which caused it is not known
        # each is asked again, one at a time: the bystander's call reaches a new server, whichever goes first
        _wait_line(log, f"hold {release}", pids=2)
        release.touch()
        for thread in (first, second):
            thread.join(120)
        assert second_out["step"].observations[0]["content"] == "released"  # not failed with the server
        assert bystander.tool_errors == 0 and bystander.tool_timeouts == 0
        # the call that brings the server down again, alone, is the one counted
        assert first_out["step"].observations[0]["content"].startswith(
            "error: tool 'die_when' failed: the MCP server exited during the call")
        assert dying.tool_errors == 1 and not running(pid)
    finally:
        env.close()


class ThreadTimeouts(MCPToolEnvironment):
    """``timeout_s`` as each thread sets it in ``limits`` (else the one given): a call can time out while one
    sent before it, with a longer limit, is still in flight."""

    def __init__(self, **kwargs) -> None:
        self.limits: dict[int, float] = {}
        super().__init__(**kwargs)

    @property
    def timeout_s(self) -> float:
        return self.limits.get(threading.get_ident(), self._timeout_s)

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self._timeout_s = value


def test_a_call_in_flight_when_another_times_out_is_asked_again_on_the_new_server(tmp_path):
    log, release = tmp_path / "calls.log", tmp_path / "release"
    env = ThreadTimeouts(command=sys.executable, args=[SERVER], env={"MCP_TEST_LOG": str(log)}, timeout_s=600.0)
    try:
        bystander, hung = env.reset(RECORD), env.reset(RECORD)
        waiting_out, waiting = _step_in_thread(env, bystander, call("hold", path=str(release)))
        _wait_line(log, f"hold {release}")
        env.limits[threading.get_ident()] = 2.0  # this thread's call runs past its limit: the server is stopped
        step = env.step(hung, call("sleep", seconds=600))
        assert step.observations[0]["content"] == "error: tool 'sleep' ran past its time limit of 2 s"
        assert hung.tool_timeouts == 1
        _wait_line(log, f"hold {release}", pids=2)  # the call in flight is asked again, on a new server
        release.touch()
        waiting.join(120)
        assert waiting_out["step"].observations[0]["content"] == "released"
        assert bystander.tool_errors == 0 and bystander.tool_timeouts == 0
        assert not running(started(log)[0])
    finally:
        env.close()


def test_restarts_that_fail_again_are_bounded_and_an_answer_clears_the_count(tmp_path):
    log = tmp_path / "calls.log"
    env = tools_env(log, max_restarts=1)
    try:
        episode = env.reset(RECORD)
        assert env.step(episode, call("die")).observations[0]["content"].startswith("error: tool 'die' failed")
        assert env.step(episode, call("shout", text="up")).observations[0]["content"] == "UP"  # restart answered
        env.step(episode, call("die"))  # the restarted server had answered: no count
        env.step(episode, call("die"))  # a restart that failed before answering: 1, the bound
        with pytest.raises(MCPServerError, match=r"failed again after each of its last 1 restart\(s\), before "
                                                 r"answering any call \(the last failure: the MCP server exited "
                                                 r"during the call\).*raise max_restarts"):
            env.step(episode, call("shout", text="again"))
        assert len(started(log)) == 3  # the first server and two restarts
    finally:
        env.close()
    with pytest.raises(ValueError, match="max_restarts=-1 must be an integer >= 0"):
        tools_env(max_restarts=-1)


def test_per_episode_servers_stop_with_their_episode(tmp_path):
    log = tmp_path / "calls.log"
    env = tools_env(log, session="episode")
    tok = chat_tokenizer()
    r = run_episodes(ScriptedEngine(tok, scripted([call("shout", text="a"), "A"])), tok, [RECORD], env, n=2,
                     sampling=SamplingParams(max_new_tokens=200), max_turns=3)
    pids = started(log)
    assert len(set(pids)) == 2 and not any(running(p) for p in pids)  # one each, stopped at the episode's end
    assert [ep.messages[2]["content"] for ep in r.episodes] == ["A", "A"] and not env._runtime.servers
    # an episode that is dropped (its run stopped on an error) stops its server when it is collected
    episode = env.reset(RECORD)
    pid = started(log)[-1]
    assert running(pid)
    del episode  # its server is stopped in a background thread: wait for it (a hung stop fails the test)
    assert eventually(lambda: not running(pid) and not env._runtime.servers)
    env.close()


def test_a_command_that_is_not_an_mcp_server_is_a_clear_error():
    env = MCPToolEnvironment(command=sys.executable, args=["-c", "pass"], start_timeout_s=20)
    with pytest.raises(MCPServerError, match=r"the MCP server .* did not start and list its tools \(.*"
                                             r"start_timeout_s=20\)"):
        env.reset(RECORD)
    assert not env._runtime.servers
    env.close()


def test_the_environment_copies_without_its_servers(shared_env):
    shared_env.reset(RECORD)  # the shared server runs
    twin = copy.deepcopy(shared_env)
    assert twin._runtime.shared is None and twin.server == shared_env.server
    twin.close()


def test_grpo_trains_two_steps_with_mcp_tools(sft_model_path, tmp_path):
    import lightning as L
    import torch

    from lit_grpo.envs import EpisodeEngine
    from lit_grpo.models.loading import load_policy, load_tokenizer
    from lit_grpo.rewards.base import RewardFunction
    from lit_grpo.types import RewardOutput
    from tests.envs.scripted import TOOL_TEMPLATE
    from tests.envs.test_episode_training import Steps, chat_policy
    from tests.helpers import tiny_data, tiny_module, tiny_trainer

    class SaysShouted(RewardFunction):
        binary = True

        def __call__(self, completions, references, **columns):
            return RewardOutput(torch.tensor([float(c == "OK") for c in completions]))

    def policy(prompt: str, k: int) -> str:
        # the policy shouts, then copies the tool's answer (samples 0 and 2) or not (1 and 3)
        turn = prompt.count("<|assistant|>")
        if turn == 1:
            return call("shout", text="ok" if k % 2 == 0 else "no") + "<eos>"
        return prompt.rsplit("<|tool|>", 1)[1].split("<eos>")[0] + "<eos>"

    path = chat_policy(sft_model_path, tmp_path / "policy")
    tokenizer = load_tokenizer(path)
    tokenizer.chat_template = TOOL_TEMPLATE  # renders the tool names: the prompt fits the tiny policy's context
    tokenizer.save_pretrained(path)
    L.seed_everything(0)
    steps = Steps()
    env = tools_env(tools=["shout"])
    try:
        engine = EpisodeEngine(env, engine=ScriptedEngine(tokenizer, policy), max_turns=3)
        module = tiny_module(path, engine=engine, reward=SaysShouted(), max_new_tokens=96)
        trainer = tiny_trainer(tmp_path, max_steps=2, callbacks=[steps])
        trainer.fit(module, datamodule=tiny_data())
    finally:
        env.close()
    assert len(steps.outputs) == 2
    for stats in steps.outputs:
        episodes = stats.rollouts.episodes
        assert all(ep.tool_calls == 1 and ep.tool_errors == 0 and ep.done for ep in episodes)
        assert [ep.messages[2]["content"] for ep in episodes[:4]] == ["OK", "NO", "OK", "NO"]
        assert stats.rewards.flatten().tolist() == [1.0, 0.0] * (len(episodes) // 2)
    assert float(trainer.callback_metrics["env/tool_calls_mean"]) == 1.0
    start = load_policy(path).state_dict()  # the rewards differ within each group, so the policy moved
    assert any(not torch.equal(module.policy.state_dict()[k].cpu(), start[k]) for k in start)


def test_the_calculator_served_over_mcp_is_the_python_tool():
    from lit_grpo.envs import ToolEnvironment
    from lit_grpo.envs.calculator import calculator

    root = str(Path(__file__).resolve().parents[2])  # this checkout's lit_grpo, wherever pytest runs from
    env = MCPToolEnvironment(command="python", args=["-m", "lit_grpo.envs.calculator_mcp"], env={"PYTHONPATH": root})
    try:
        _, ep, _ = episode_of(env, [call("calculator", expression="(12 + 3) * 47")
                                    + call("calculator", expression="__import__('os')"), "705"])
        # the policy sees the schema it sees for the Python tool, to the character: the supervised start carries over
        assert ep.tools == ToolEnvironment(tools=[calculator]).schemas
        assert ep.tool_instructions == ToolEnvironment(tools=[calculator]).reset(RECORD).tool_instructions
        assert ep.messages[2]["content"] == calculator("(12 + 3) * 47") == "705"
        refused = ep.messages[3]["content"]
        assert refused.startswith("error: tool 'calculator' failed: ") and "not allowed" in refused.lower()
    finally:
        env.close()
