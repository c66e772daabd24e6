"""An OpenEnv environment server on the loopback address, driven through OpenEnvEnvironment by a scripted policy;
a server that hangs in a step, one that dies in it, and the bound on the new sessions opened after such failures
(tests/envs/openenv_server.py, a process of its own)."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv.core", reason="the OpenEnv adapter needs openenv-core: pip install 'lit-grpo[openenv]'")
uvicorn = pytest.importorskip("uvicorn", reason="the test server needs uvicorn (a dependency of openenv-core)")

from openenv.core.env_server.http_server import create_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment as ServerEnvironment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from pydantic import Field  # noqa: E402

from lit_grpo.envs import run_episodes  # noqa: E402
from lit_grpo.envs.openenv_adapter import OpenEnvEnvironment, OpenEnvError  # noqa: E402
from lit_grpo.types import SamplingParams  # noqa: E402
from tests.envs.scripted import ScriptedEngine, chat_tokenizer  # noqa: E402


class GuessAction(Action):
    message: str = Field(...)


class GuessObservation(Observation):
    hint: str = Field(default="")


class GuessServer(ServerEnvironment):
    """Guess 7: "higher"/"lower" hints, reward 1 on the right guess, done then or after 3 guesses."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        self._state = State(episode_id="0", step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._state = State(episode_id=episode_id or "0", step_count=0)
        return GuessObservation(hint="guess a number from 1 to 9", done=False, reward=0.0)

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        guess = int(action.message) if action.message.isdigit() else 0
        right = guess == 7
        hint = "right" if right else ("higher" if guess < 7 else "lower")
        return GuessObservation(hint=hint, done=right or self._state.step_count >= 3, reward=float(right))

    @property
    def state(self):
        return self._state


@contextlib.contextmanager
def serve(app):
    """``app`` served by uvicorn on a free loopback port, in a thread; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the OpenEnv test server did not start on the loopback address"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def server_url():
    with serve(create_app(GuessServer, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=16)) as url:
        yield url


@pytest.fixture(scope="module")
def echo_package(tmp_path_factory):
    """The echo environment that ``openenv init echo_env`` generates, importable as ``echo_env``."""
    root = tmp_path_factory.mktemp("openenv-init")
    done = subprocess.run([sys.executable, "-m", "openenv.cli", "init", "echo_env", "--output-dir", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("echo_env")
    finally:
        sys.path.remove(str(root))


@pytest.fixture(scope="module")
def echo_url(echo_package):
    """The generated echo server, allowing 16 concurrent sessions (the template allows 1: "increase this number")."""
    from echo_env.server.echo_env_environment import EchoEnvironment

    app = create_app(EchoEnvironment, echo_package.EchoAction, echo_package.EchoObservation, env_name="echo_env",
                     max_concurrent_envs=16)
    with serve(app) as url:
        yield url


@pytest.fixture
def echo_one_session_url(echo_package):
    """The generated echo server exactly as ``openenv init`` writes it: one session at a time."""
    app = importlib.import_module("echo_env.server.app").app
    with serve(app) as url:
        yield url


def _respond(prompt: str, k: int) -> str:
    # sample 0 goes up from 5 (5, 6, 7: right on the third guess); sample 1 always guesses 3 (never right)
    turn = prompt.count("<|assistant|>")
    first = ("5" if k == 0 else "3") if turn == 1 else prompt.split("<|assistant|>")[1][0]
    return (str(4 + turn) if first == "5" else "3") + "<eos>"


def test_episodes_run_against_an_openenv_server(server_url):
    tok = chat_tokenizer()
    env = OpenEnvEnvironment(base_url=server_url, observation_field="hint", opening="both")
    records = [{"prompt": f"Game {i}.", "reference": "7", "id": str(i), "columns": {}} for i in range(2)]
    r = run_episodes(ScriptedEngine(tok, _respond), tok, records, env, n=2,
                     sampling=SamplingParams(max_new_tokens=4), max_turns=5)
    assert [ep.reward for ep in r.episodes] == [1.0, 0.0, 1.0, 0.0]
    assert [ep.turns for ep in r.episodes] == [3, 3, 3, 3] and all(ep.done for ep in r.episodes)
    assert r.texts == ["7", "3", "7", "3"] and not r.truncated.any()
    first = r.episodes[0].messages
    assert first[0] == {"role": "user", "content": "Game 0.\n\nguess a number from 1 to 9"}
    assert [m["content"] for m in first[1:]] == ["5", "higher", "6", "higher", "7"]
    assert all("client" not in ep.state for ep in r.episodes)  # every session closed


def test_a_server_that_is_not_there_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free: nothing listens here
    env = OpenEnvEnvironment(base_url=f"http://127.0.0.1:{port}", connect_timeout_s=2)
    with pytest.raises(RuntimeError, match=r"OpenEnv server http://127.0.0.1:\d+: connect failed"):
        env.reset({"prompt": "Q", "reference": "", "id": "0", "columns": {}})


def test_grpo_trains_two_steps_against_an_openenv_server(server_url, sft_model_path, tmp_path):
    import lightning as L

    from lit_grpo.envs import EpisodeEngine
    from tests.envs.test_episode_training import Steps, chat_policy
    from tests.helpers import tiny_data, tiny_module, tiny_trainer

    L.seed_everything(0)
    steps = Steps()
    env = OpenEnvEnvironment(base_url=server_url, observation_field="hint", opening="both")
    module = tiny_module(chat_policy(sft_model_path, tmp_path / "policy"), engine=EpisodeEngine(env, max_turns=3),
                         max_new_tokens=4)
    trainer = tiny_trainer(tmp_path, max_steps=2, callbacks=[steps])
    trainer.fit(module, datamodule=tiny_data())
    assert len(steps.outputs) == 2
    for stats in steps.outputs:  # every reward trained on is the server's (0 for an episode cut before its 1st step)
        for reward, ep in zip(stats.rewards.flatten().tolist(), stats.rollouts.episodes, strict=True):
            assert ep.turns >= 1 and "client" not in ep.state  # every session closed
            assert ep.reward is not None and reward == ep.reward
    assert float(trainer.callback_metrics["env/turns_mean"]) >= 1.0


def test_grpo_trains_two_steps_against_the_openenv_echo_server(echo_url, sft_model_path, tmp_path):
    import lightning as L

    from lit_grpo.envs import EpisodeEngine
    from tests.envs.test_episode_training import Steps, chat_policy
    from tests.helpers import tiny_data, tiny_module, tiny_trainer

    L.seed_everything(0)
    steps = Steps()
    env = OpenEnvEnvironment(base_url=echo_url, observation_field="echoed_message")
    module = tiny_module(chat_policy(sft_model_path, tmp_path / "policy"), engine=EpisodeEngine(env, max_turns=2),
                         max_new_tokens=4)
    trainer = tiny_trainer(tmp_path, max_steps=2, callbacks=[steps])
    trainer.fit(module, datamodule=tiny_data())
    assert len(steps.outputs) == 2
    for stats in steps.outputs:  # the echo server's reward, 0.1 per character sent, is the one trained on
        for reward, ep in zip(stats.rewards.flatten().tolist(), stats.rollouts.episodes, strict=True):
            assert ep.reward is not None and reward == pytest.approx(ep.reward, rel=2**-23)  # float32 rewards
            assert ep.reward * 10 == pytest.approx(round(ep.reward * 10))  # 0.1 per character
            assert "client" not in ep.state  # every session closed
    assert not env._sessions


RECORD = {"prompt": "Say something.", "reference": "", "id": "0", "columns": {}}


def test_a_failed_reset_closes_its_session(echo_one_session_url):
    # the server allows one session; a reset that fails after the session opened must give it back
    wrong = OpenEnvEnvironment(base_url=echo_one_session_url, observation_field="no_such_field")
    with pytest.raises(ValueError, match="no field 'no_such_field'"):
        wrong.reset(RECORD)
    right = OpenEnvEnvironment(base_url=echo_one_session_url, observation_field="echoed_message", opening="both")
    episode = right.reset(RECORD)
    assert episode.messages[-1]["content"] == "Say something.\n\nEcho Env environment ready!"
    assert "client" in episode.state
    right.close()
    assert "client" in episode.state and not right._sessions  # closed by close(): the episode cannot step


def test_a_server_at_its_session_limit_is_a_clear_error(echo_one_session_url):
    env = OpenEnvEnvironment(base_url=echo_one_session_url, observation_field="echoed_message")
    first = env.reset(RECORD)
    with pytest.raises(RuntimeError, match=r"at its session limit \(.*Server at capacity: 1/1 sessions active.*"
                                           r"raise max_concurrent_envs"):
        env.reset(RECORD)
    assert len(env._sessions) == 1  # the refused session is closed, the first one still open
    env.step(first, "hi")
    assert env.reward(first) == pytest.approx(0.2) and not env._sessions  # reading the reward closes it
    again = env.reset(RECORD)  # its slot is free again
    assert "client" in again.state
    del again  # a dropped episode (its run stopped on an error) gives its session back when it is collected
    deadline = time.monotonic() + 60
    while env._sessions and time.monotonic() < deadline:  # closed in a background thread
        time.sleep(0.1)
    assert not env._sessions
    env.reward(_one_turn(env, "x"))  # the slot is free again


def _one_turn(env, text: str):
    episode = env.reset(RECORD)
    episode.messages.append({"role": "assistant", "content": text})
    env.step(episode, text)
    return episode


class SilentServer(GuessServer):
    """The guessing game with no rewards at all."""

    def reset(self, seed=None, episode_id=None, **kwargs):
        return super().reset().model_copy(update={"reward": None})

    def step(self, action, timeout_s=None, **kwargs):
        return super().step(action).model_copy(update={"reward": None})


def test_an_episode_without_a_server_reward_is_an_error_or_an_explicit_zero(echo_url):
    # one group, one source of rewards: an episode without a reward from the server must not fall back to the
    # configured reward function (as the other episodes of its group take the server's)
    env = OpenEnvEnvironment(base_url=echo_url, observation_field="echoed_message")
    assert env.reward(_one_turn(env, "hello")) == pytest.approx(0.5)  # the echo server's: 0.1 per character
    unanswered = env.reset(RECORD)
    unanswered.truncated = True  # its first turn hit the token limit: nothing reached the server
    assert env.reward(unanswered) == 0.0
    app = create_app(SilentServer, GuessAction, GuessObservation, env_name="silent", max_concurrent_envs=4)
    with serve(app) as silent_url:
        silent = OpenEnvEnvironment(base_url=silent_url, observation_field="hint")
        with pytest.raises(RuntimeError, match=r"OpenEnv server http://127.0.0.1:\d+ gave episode '0' no reward "
                                               r"\(its reset and 1 step\(s\), none with a reward.*missing_reward: zero"):
            silent.reward(_one_turn(silent, "5"))
        zero = OpenEnvEnvironment(base_url=silent_url, observation_field="hint", missing_reward="zero")
        assert zero.reward(_one_turn(zero, "5")) == 0.0
    # reward: none leaves every episode to the configured reward
    configured = OpenEnvEnvironment(base_url=echo_url, observation_field="echoed_message", reward="none")
    assert configured.reward(_one_turn(configured, "hello")) is None


# ---- structured actions: an MCP environment's tools, called with call_tool actions ---------------------------
def _tool_server_class():
    from fastmcp import FastMCP
    from openenv.core.env_server.mcp_environment import MCPEnvironment
    from openenv.core.env_server.mcp_types import CallToolAction

    class MultiplyTools(MCPEnvironment):
        """Tools multiply(a, b) and submit(answer); submit ends the episode, reward 1 for 42 (0 for every call)."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            server = FastMCP("multiply")

            @server.tool()
            def multiply(a: int, b: int) -> int:
                """Multiply two integers.

                Args:
                    a: The first factor.
                    b: The second factor.
                """
                return a * b

            @server.tool()
            def submit(answer: str) -> str:
                """Submit the final answer.

                Args:
                    answer: The answer.
                """
                return "submitted"

            super().__init__(server)
            self._state = State(episode_id="0", step_count=0)

        def reset(self, seed=None, episode_id=None, **kwargs):
            self._state = State(episode_id=episode_id or "0", step_count=0)
            return Observation(done=False, reward=0.0)

        def _step_impl(self, action, timeout_s=None, **kwargs):
            return Observation(done=False, reward=0.0, metadata={"error": "call a tool"})

        async def step_async(self, action, timeout_s=None, **kwargs):
            observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
            if isinstance(action, CallToolAction):
                observation.reward = 0.0
                if action.tool_name == "submit" and observation.error is None:
                    observation.done = True
                    observation.reward = float(str(action.arguments.get("answer")) == "42")
            return observation

        @property
        def state(self):
            return self._state

    return MultiplyTools


@pytest.fixture(scope="module")
def tools_url():
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

    app = create_app(_tool_server_class(), CallToolAction, CallToolObservation, env_name="multiply",
                     max_concurrent_envs=16)
    with serve(app) as url:
        yield url


def _call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call><eos>"


def _tool_policy(prompt: str, k: int) -> str:
    # sample 0: multiply, then submit the product; sample 1: a call with a bad argument, then an unknown tool,
    # then a plain answer (no call: the episode ends without a submit)
    turn = prompt.count("<|assistant|>")
    if turn == 1:
        return _call("multiply", a=6, b=7) if k == 0 else _call("multiply", a="six", b=7)
    if '"six"' not in prompt:
        return _call("submit", answer=prompt.split("<|tool|>")[1][:2])
    return _call("divide", a=6, b=7) if turn == 2 else "42<eos>"


def test_tool_calls_go_to_the_server_as_call_tool_actions(tools_url):
    tok = chat_tokenizer()
    env = OpenEnvEnvironment(base_url=tools_url, actions="tools")
    record = {"prompt": "What is 6 * 7?", "reference": "42", "id": "0", "columns": {}}
    r = run_episodes(ScriptedEngine(tok, _tool_policy), tok, [record], env, n=2,
                     sampling=SamplingParams(max_new_tokens=80), max_turns=4)
    right, wrong = r.episodes
    # the policy sees the server's tools as episode tools: names, descriptions, argument schemas
    assert [t["function"]["name"] for t in right.tools] == ["multiply", "submit"]
    multiply = right.tools[0]["function"]
    assert multiply["description"].startswith("Multiply two integers.")
    assert multiply["parameters"]["required"] == ["a", "b"]
    assert {k: v["type"] for k, v in multiply["parameters"]["properties"].items()} == {"a": "integer", "b": "integer"}
    assert "tools:multiply;submit;" in tok.decode(r.prompt_ids[0])  # rendered by the template's tool format
    assert right.messages[2] == {"role": "tool", "name": "multiply", "content": "42"}
    assert right.done and right.turns == 2 and right.reward == 1.0 and right.tool_calls == 2
    assert [m["role"] for m in wrong.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert "argument 'a' must be integer" in wrong.messages[2]["content"]
    assert "unknown tool 'divide'" in wrong.messages[4]["content"]
    assert wrong.tool_errors == 2 and wrong.done and wrong.turns == 3
    assert wrong.reward == 0.0  # no call reached the server: its reward is the reset's
    assert not env._sessions and all("client" not in ep.state for ep in r.episodes)


def test_tools_actions_on_a_text_action_server_is_a_clear_error(echo_url):
    env = OpenEnvEnvironment(base_url=echo_url, actions="tools")
    with pytest.raises(RuntimeError, match="list_tools failed|listed no MCP tools"):
        env.reset(RECORD)
    assert not env._sessions


# ---- servers that fail: a step that hangs, a server that dies in a step, the bound on new sessions ----------
FAILING_SERVER = str(Path(__file__).with_name("openenv_server.py"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def failing_server(port: int, log: Path):
    """tests/envs/openenv_server.py on 127.0.0.1:``port``, a process of its own (killed at the end); yields it."""
    process = subprocess.Popen([sys.executable, FAILING_SERVER, str(port)],
                               env={**os.environ, "OPENENV_TEST_LOG": str(log)})
    try:
        deadline = time.monotonic() + 120  # a hang guard, not a time limit
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the failing server did not start"
                time.sleep(0.1)
        yield process
    finally:
        process.kill()
        process.wait(60)


def _served(log: Path) -> list[str]:
    """The resets and steps the server processes logged, in order."""
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()]


def test_a_step_that_hangs_is_a_timeout_and_the_episode_goes_on_in_a_new_session(tmp_path):
    port, log = _free_port(), tmp_path / "server.log"
    with failing_server(port, log):
        env = OpenEnvEnvironment(base_url=f"http://127.0.0.1:{port}", observation_field="heard",
                                 message_timeout_s=10)
        episode = env.reset(RECORD)
        hung = env.step(episode, "hang")
        assert hung.observations == [{"role": "user", "content": (
            "error: the OpenEnv server did not answer the step in 10 s (message_timeout_s); a new session, "
            "reset, serves the next turn")}]
        assert not hung.done and episode.tool_timeouts == 1 and episode.tool_errors == 0
        assert env.step(episode, "hi").observations[0]["content"] == "hi"
        assert _served(log) == ["reset", "step hang", "reset", "step hi"]  # the new session was reset first
        assert env.reward(episode) == 1.0  # the two resets' 0 and the answered step's 1
        assert not env._sessions


def test_a_server_that_dies_in_a_step_is_an_error_and_a_new_session_serves_the_next_step(tmp_path):
    port, log = _free_port(), tmp_path / "server.log"
    env = OpenEnvEnvironment(base_url=f"http://127.0.0.1:{port}", observation_field="heard")
    with failing_server(port, log) as server:
        episode = env.reset(RECORD)
        died = env.step(episode, "die")
        assert server.wait(60) == 3  # the server process ended in the middle of the step
    content = died.observations[0]["content"]
    assert content.startswith("error: the OpenEnv server failed the step (")
    assert content.endswith("; a new session, reset, serves the next turn")
    assert episode.tool_errors == 1 and episode.tool_timeouts == 0 and not died.done
    with failing_server(port, log):  # the server is back on its address
        assert env.step(episode, "back").observations[0]["content"] == "back"
        env.step(episode, "die")
    assert episode.tool_errors == 2
    # no server to open a session on: the run stops, naming the server
    with pytest.raises(OpenEnvError, match=r"OpenEnv server http://127.0.0.1:\d+: connect failed"):
        env.step(episode, "again")


def test_new_sessions_that_fail_again_are_bounded_and_an_answer_clears_the_count(tmp_path):
    port, log = _free_port(), tmp_path / "server.log"
    with failing_server(port, log):
        env = OpenEnvEnvironment(base_url=f"http://127.0.0.1:{port}", observation_field="heard",
                                 message_timeout_s=10, max_restarts=1)
        episode = env.reset(RECORD)
        env.step(episode, "hang")  # the episode's first session: not a restart
        assert env.step(episode, "hi").observations[0]["content"] == "hi"  # a new session that answered
        env.step(episode, "hang")  # its session had answered: no count
        env.step(episode, "hang")  # a new session that failed before answering: 1, the bound
        with pytest.raises(OpenEnvError, match=r"failed each of the last 1 new session\(s\) before it answered a "
                                               r"step \(the last failure: did not answer the step in 10 s.*raise "
                                               r"max_restarts"):
            env.step(episode, "hi")
        assert episode.tool_timeouts == 3
        assert _served(log).count("reset") == 3  # the first session and two new ones
        env.close()
    with pytest.raises(ValueError, match="max_restarts=-1 must be an integer >= 0"):
        OpenEnvEnvironment(base_url="http://127.0.0.1:1", max_restarts=-1)
