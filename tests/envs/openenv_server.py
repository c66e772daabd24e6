"""An OpenEnv server that fails when told to, for the tests of servers that fail: ``python
tests/envs/openenv_server.py PORT``, on 127.0.0.1 (a process of its own, so that it can die).

Text actions (``message``): ``hang`` blocks the step for good, ``die`` ends the server process in the middle of the
step, anything else is echoed back (``heard``) with reward 1; a reset answers ``ready`` with reward 0. Each reset
and step is appended to the file named by ``OPENENV_TEST_LOG`` when set.
"""

from __future__ import annotations

import os
import sys
import threading

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field


class Say(Action):
    message: str = Field(...)


class Heard(Observation):
    heard: str = Field(default="")


def _log(line: str) -> None:
    path = os.environ.get("OPENENV_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {line}\n")


class Failing(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        self._state = State(episode_id="0", step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs):
        _log("reset")
        self._state = State(episode_id=episode_id or "0", step_count=0)
        return Heard(heard="ready", done=False, reward=0.0)

    def step(self, action, timeout_s=None, **kwargs):
        _log(f"step {action.message}")
        if action.message == "hang":
            threading.Event().wait()
        if action.message == "die":
            os._exit(3)
        self._state.step_count += 1
        return Heard(heard=action.message, done=False, reward=1.0)

    @property
    def state(self):
        return self._state


if __name__ == "__main__":
    app = create_app(Failing, Say, Heard, env_name="failing", max_concurrent_envs=8)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="critical")
