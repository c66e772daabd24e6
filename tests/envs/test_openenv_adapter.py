"""An OpenEnv environment server on the loopback address, driven through OpenEnvEnvironment by a scripted policy."""

from __future__ import annotations

import socket
import threading
import time

import pytest

pytest.importorskip("openenv.core", reason="the OpenEnv adapter needs openenv-core: pip install 'lit-grpo[openenv]'")
uvicorn = pytest.importorskip("uvicorn", reason="the test server needs uvicorn (a dependency of openenv-core)")

from openenv.core.env_server.http_server import create_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment as ServerEnvironment  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from pydantic import Field  # noqa: E402

from lit_grpo.envs import run_episodes  # noqa: E402
from lit_grpo.envs.openenv_adapter import OpenEnvEnvironment  # noqa: E402
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


@pytest.fixture(scope="module")
def server_url():
    app = create_app(GuessServer, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=16)
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
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


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
    owned = 0
    for stats in steps.outputs:  # where the server gave a reward, it is the one trained on
        for reward, ep in zip(stats.rewards.flatten().tolist(), stats.rollouts.episodes, strict=True):
            assert ep.turns >= 1 and "client" not in ep.state  # every session closed
            if ep.reward is not None:
                owned += 1
                assert reward == ep.reward
    assert owned > 0
    assert float(trainer.callback_metrics["env/turns_mean"]) >= 1.0
