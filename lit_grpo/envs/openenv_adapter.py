"""Environments served by OpenEnv (``openenv-core``, the environment protocol TRL integrates) as lit-grpo environments.

Each episode opens its own WebSocket session on the server (OpenEnv's ``GenericEnvClient``), so the server must
allow as many concurrent sessions as episodes run at once (``create_app(..., max_concurrent_envs=...)`` and an
environment with ``SUPPORTS_CONCURRENT_SESSIONS = True``). The assistant's turn text goes into one field of the
server's action; one field of each observation (or the whole observation as JSON) comes back as a message. The
episode ends when the server says ``done``; its reward is the sum (or last) of the step rewards, or left to the
configured reward. The session is closed when the episode ends or, at the latest, when its reward is read.

Install the extra: ``pip install 'lit-grpo[openenv]'``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from lit_grpo.checks import require
from lit_grpo.envs.base import Environment, Episode, Record, StepResult, user_messages

#: the optional extra this module's classes need (lit_grpo.extras)
EXTRA = "openenv"
INSTALL_HINT = "OpenEnvEnvironment needs openenv-core: pip install 'lit-grpo[openenv]' (or pip install openenv-core)"


class OpenEnvEnvironment(Environment):
    """An OpenEnv environment server, one session per episode.

    Args:
        base_url: The server's address, e.g. ``http://127.0.0.1:8000``.
        action_field: The action field that receives each assistant turn's text.
        observation_field: The observation field shown to the policy (null: the whole observation as JSON).
        opening: The opening user message: the record's ``prompt``, the ``observation`` returned by the server's
            reset, or ``both`` (the prompt, a blank line, the observation).
        observation_role: Role of the observation messages (``user``, or ``tool`` for tool-like servers).
        reward: The episode's reward: the ``sum`` or the ``last`` of the step rewards (missing ones count 0), or
            ``none`` to score the final answer with the configured reward function.
        system_prompt: A system message before the opening message (null: none).
        connect_timeout_s: Seconds to open a session.
        message_timeout_s: Seconds to wait for the server's answer to a reset or a step.
    """

    def __init__(self, base_url: str, action_field: str = "message", observation_field: str | None = None,
                 opening: Literal["prompt", "observation", "both"] = "prompt",
                 observation_role: Literal["user", "tool"] = "user", reward: Literal["sum", "last", "none"] = "sum",
                 system_prompt: str | None = None, connect_timeout_s: float = 10.0,
                 message_timeout_s: float = 60.0) -> None:
        require(base_url.startswith(("http://", "https://", "ws://", "wss://")),
                f"OpenEnvEnvironment: base_url={base_url!r} must start with http://, https://, ws:// or wss://")
        require(opening in ("prompt", "observation", "both"), f"opening={opening!r}; use prompt, observation or both")
        require(observation_role in ("user", "tool"), f"observation_role={observation_role!r}; use user or tool")
        require(reward in ("sum", "last", "none"), f"reward={reward!r}; use sum, last or none")
        require(connect_timeout_s > 0 and message_timeout_s > 0, "connect_timeout_s and message_timeout_s must be > 0")
        self.base_url, self.action_field, self.observation_field = base_url, action_field, observation_field
        self.opening, self.observation_role, self.reward_mode = opening, observation_role, reward
        self.system_prompt = system_prompt
        self.connect_timeout_s, self.message_timeout_s = connect_timeout_s, message_timeout_s

    def reset(self, record: Record) -> Episode:
        client = self._connect()
        result = self._call(client, "reset", lambda: client.reset())
        messages = user_messages(record, self.system_prompt)
        shown = self._show(result.observation)
        if self.opening == "observation":
            messages[-1]["content"] = shown
        elif self.opening == "both":
            messages[-1]["content"] = f"{messages[-1]['content']}\n\n{shown}"
        episode = Episode(record=record, messages=messages, state={"client": client, "rewards": []})
        if result.done:  # a server may end an episode at reset
            self._close(episode)
        return episode

    def step(self, episode: Episode, text: str) -> StepResult:
        client = episode.state.get("client")
        require(client is not None, "OpenEnvEnvironment.step on an episode whose session has ended")
        result = self._call(client, "step", lambda: client.step({self.action_field: text}))
        episode.state["rewards"].append(result.reward)
        if result.done:
            self._close(episode)
            return StepResult(observations=[], done=True)
        return StepResult([{"role": self.observation_role, "content": self._show(result.observation)}], done=False)

    def reward(self, episode: Episode) -> float | None:
        self._close(episode)
        rewards = [0.0 if r is None else float(r) for r in episode.state["rewards"]]
        if self.reward_mode == "none" or not rewards:
            return None
        return sum(rewards) if self.reward_mode == "sum" else rewards[-1]

    # ---- sessions ----------------------------------------------------------------------------------
    def _connect(self):
        try:
            from openenv.core import GenericEnvClient
        except ImportError:
            raise ImportError(INSTALL_HINT) from None
        client = GenericEnvClient(base_url=self.base_url, connect_timeout_s=self.connect_timeout_s,
                                  message_timeout_s=self.message_timeout_s).sync()
        self._call(client, "connect", client.connect)
        return client

    def _call(self, client, what: str, call):
        try:
            return call()
        except Exception as err:
            try:
                client.close()
            except Exception:  # the session is already broken; the error below says why
                pass
            raise RuntimeError(
                f"OpenEnv server {self.base_url}: {what} failed ({type(err).__name__}: {err}); check that the server "
                "runs and allows as many concurrent sessions as episodes run at once (max_concurrent_envs)"
            ) from err

    @staticmethod
    def _close(episode: Episode) -> None:
        client = episode.state.pop("client", None)
        if client is not None:
            client.close()

    def _show(self, observation: Any) -> str:
        if self.observation_field is None:
            return observation if isinstance(observation, str) else json.dumps(observation, default=str)
        require(isinstance(observation, dict) and self.observation_field in observation,
                f"OpenEnvEnvironment: the observation has no field {self.observation_field!r}; its fields are "
                f"{sorted(observation) if isinstance(observation, dict) else type(observation).__name__}. "
                "Set observation_field to one of them (or null for the whole observation)")
        return str(observation[self.observation_field])
