"""The environment interface: an episode starts from a data record; the environment answers each turn.

An :class:`Environment` is configured once (``class_path``/``init_args``, like every component) and holds no
episode state: :meth:`Environment.reset` returns a fresh :class:`Episode` for each of the ``G`` episodes of a
record, and :meth:`Environment.step` and :meth:`Environment.reward` read and change only the episode they are
given, so the episodes of a step run side by side without sharing anything.

A record is the dict a :class:`~lit_grpo.data.sources.PromptSource` returns:
``{"prompt": str, "reference": str, "id": str, "columns": {name: value}}``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from lit_grpo.checks import require

Message = dict[str, Any]  # {"role": "system" | "user" | "assistant" | "tool", "content": str, ...}
Record = dict[str, Any]
T = TypeVar("T")
TurnReduction = Literal["sum", "mean", "last", "min", "max"]
#: How an episode's per-turn rewards make its reward (``Environment.turn_reward``).
TURN_REDUCTIONS = {
    "sum": sum,
    "mean": lambda rewards: sum(rewards) / len(rewards),
    "last": lambda rewards: rewards[-1],
    "min": min,
    "max": max,
}


@dataclass
class Episode:
    """One episode's state: the conversation so far, the environment's own state and the counters.

    The driver (:func:`lit_grpo.envs.run_episodes`) appends each assistant turn (``{"role": "assistant",
    "content": text}``) and each step's observations to ``messages`` and fills ``turns``, ``done``,
    ``truncated``, ``answered`` and ``reward``; environments count their tool calls here. ``messages`` hold
    exactly what the episode's tokens hold: observations that no further turn reads (after the last turn, or
    past the token budget) are left out.
    """

    record: Record
    messages: list[Message]  # the conversation: reset's messages, then assistant turns and observations
    tools: list[dict] = field(default_factory=list)  # JSON schemas of the tools this episode offers
    tool_instructions: str = ""  # how to call them, for chat templates without a tool format
    state: dict[str, Any] = field(default_factory=dict)  # the environment's own per-episode state
    turns: int = 0  # assistant turns sampled
    tool_calls: int = 0  # tool calls made (malformed ones included)
    tool_errors: int = 0  # calls answered with an error: malformed, unknown tool, tool raised, bad result
    tool_timeouts: int = 0  # calls that ran past the tool time limit
    observations_cut: int = 0  # observations cut to max_observation_tokens or to the episode's room left
    context_exhausted: bool = False  # observations could not fit the room left, even cut: it ended
    env_seconds: float = 0.0  # wall-clock seconds spent in reset, step and reward
    done: bool = False  # the environment ended the episode
    truncated: bool = False  # max_turns, the token budget or a turn without EOS ended it
    answered: bool = False  # it ended on an answer: done, or a last turn cut without EOS that is no call
    max_turns: int = 0  # the most assistant turns it could have had (the driver's max_turns)
    turn_tokens: list[int] = field(default_factory=list)  # tokens the policy sampled in each turn
    # each turn's reward, when the environment gives them
    turn_rewards: list[float] = field(default_factory=list)
    reward: float | None = None  # the environment's own reward, when it owns one (NaN: unscorable)

    @property
    def final_answer(self) -> str:
        """The last assistant turn ("" before the first one)."""
        turns = [m["content"] for m in self.messages if m["role"] == "assistant"]
        return turns[-1] if turns else ""


@dataclass
class StepResult:
    """What the environment answers to one assistant turn."""

    observations: list[Message]  # messages appended after the turn (role "tool" or "user"); [] when done
    done: bool  # True: the episode ends with this turn
    reward: float | None = None  # this turn's reward, for an environment that declares ``turn_reward``


class Environment(ABC):
    """Starts episodes from data records and answers the policy's turns.

    Subclasses implement :meth:`reset` and :meth:`step`, and :meth:`reward` when the environment owns the
    reward. Keep all per-episode state in the :class:`Episode` (``episode.state``), never on ``self``.

    Per-turn rewards: an environment that sets ``turn_reward`` (``sum``, ``mean``, ``last``, ``min`` or
    ``max``) gives each turn a reward in ``StepResult.reward`` (None counts as 0, as does a turn it was not
    asked to answer: one cut without EOS, or a last turn that is no answer); the episode's reward is their
    ``turn_reward`` reduction over its sampled turns (``Episode.turn_rewards``), and :meth:`reward` must then
    return None, so an episode has one reward source.
    """

    #: How per-turn rewards make the episode's reward; None: the environment gives no per-turn rewards.
    turn_reward: TurnReduction | None = None

    @abstractmethod
    def reset(self, record: Record) -> Episode:
        """A new episode for ``record``: its opening messages (e.g. a system message and the question)."""

    @abstractmethod
    def step(self, episode: Episode, text: str) -> StepResult:
        """The answer to the assistant turn ``text`` (already appended to ``episode.messages``)."""

    def reward(self, episode: Episode) -> float | None:
        """The episode's reward, or None to let the configured reward function score the final answer."""
        return None

    def answers(self, episode: Episode, text: str) -> bool:
        """Whether the assistant turn ``text`` would be the episode's answer (rather than a tool call or
        another move that asks for a further turn), decided without acting on it.

        The driver asks on the turns it will not continue: the last allowed turn, before stepping it (a turn
        that is no answer is then not stepped, so no tool runs for a result no turn would read), and a turn
        cut without EOS (never stepped). An episode whose last turn is no answer is *unanswered* and scored
        as ``truncated_reward`` says. The default, True, steps the last turn and leaves cut turns scored as
        cut completions are; environments that can tell (``ToolEnvironment``: the turn holds no call) override
        it.
        """
        return True

    def turn_reduction(self, episode: Episode) -> TurnReduction | None:
        """How ``episode``'s turn rewards make its reward: ``turn_reward`` (a router: the episode's own)."""
        return self.turn_reward


async def step_async(environment: Environment, episode: Episode, text: str) -> StepResult:
    """``environment``'s answer to the turn ``text``: its ``astep`` coroutine where it has one (so the steps
    of different episodes run at once, e.g. :class:`~lit_grpo.envs.ToolEnvironment`'s tool calls), else its
    ``step`` in the calling thread."""
    astep = getattr(environment, "astep", None)
    if astep is not None:
        return await astep(episode, text)
    return environment.step(episode, text)


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Runs ``coro`` to its end from sync code: on a new event loop in this thread, or in a helper thread when
    this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as helper:
        return helper.submit(asyncio.run, coro).result()


def user_messages(record: Record, system_prompt: str | None = None) -> list[Message]:
    """The opening messages of most environments: an optional system message, then the record's prompt."""
    require(isinstance(record.get("prompt"), str),
            f"a record needs a text 'prompt' to start an episode; got fields {sorted(record)}")
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, {"role": "user", "content": record["prompt"]}]


class SingleTurn(Environment):
    """One assistant turn and done: the prompt as a user message, the answer scored by the configured reward.

    Args:
        system_prompt: A system message before the prompt (null: none).
    """

    def __init__(self, system_prompt: str | None = None) -> None:
        self.system_prompt = system_prompt

    def reset(self, record: Record) -> Episode:
        return Episode(record=record, messages=user_messages(record, self.system_prompt))

    def step(self, episode: Episode, text: str) -> StepResult:
        return StepResult(observations=[], done=True)


class EnvironmentRouter(Environment):
    """Chooses each record's environment by the value of one of its data columns.

    Args:
        column: The record column that names the environment (a key of ``columns``).
        environments: Environment for each value of the column.
        default: Environment for records without the column or with a value not in ``environments`` (null:
            such a record is an error naming the value).
    """

    def __init__(self, column: str, environments: dict[str, Environment],
                 default: Environment | None = None) -> None:
        require(bool(environments) or default is not None,
                "EnvironmentRouter: environments is empty and there is no default; map at least one "
                "column value")
        self.column = column
        self.environments = dict(environments)
        self.default = default

    def route(self, record: Record) -> Environment:
        """The environment for ``record``."""
        value = record.get("columns", {}).get(self.column)
        env = self.environments.get(str(value)) if value is not None else None
        require(env is not None or self.default is not None,
                f"EnvironmentRouter: record {record.get('id')!r} has {self.column}={value!r}, which names no "
                f"environment; known values: {sorted(self.environments)}. Add it to environments or "
                "set a default")
        return env or self.default

    def reset(self, record: Record) -> Episode:
        env = self.route(record)
        episode = env.reset(record)
        episode.state["environment"] = env
        return episode

    def step(self, episode: Episode, text: str) -> StepResult:
        return episode.state["environment"].step(episode, text)

    async def astep(self, episode: Episode, text: str) -> StepResult:
        return await step_async(episode.state["environment"], episode, text)

    def reward(self, episode: Episode) -> float | None:
        return episode.state["environment"].reward(episode)

    def answers(self, episode: Episode, text: str) -> bool:
        return episode.state["environment"].answers(episode, text)

    def turn_reduction(self, episode: Episode) -> TurnReduction | None:
        return episode.state["environment"].turn_reduction(episode)
