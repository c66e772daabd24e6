"""A sync environment's steps in a bounded thread pool, so that a rollout's episodes wait on it together.

The rollout awaits the live episodes' answers together (:func:`lit_grpo.envs.base.step_async`); an environment
with only a sync ``step`` answers them one after another. :class:`ConcurrentSteps` runs such a ``step`` in up
to ``workers`` threads: worth it where a step waits (a remote server, a subprocess, a sleep), not where it
computes in Python (the GIL). The wrapped environment must let its episodes be stepped from several threads at
once, which the :class:`~lit_grpo.envs.Environment` contract (no episode state on the environment) gives, and
it gives up what only the main thread has: a ``SIGALRM`` time limit inside ``step`` (tools that need a hard
limit belong in :class:`~lit_grpo.envs.ToolEnvironment`, isolated).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lit_grpo.checks import require
from lit_grpo.envs.base import Environment, Episode, Record, StepResult


class ConcurrentSteps(Environment):
    """``environment`` with its ``step`` run in up to ``workers`` threads, a rollout's episodes side by side.

    Args:
        environment: A sync environment (one without ``astep``).
        workers: Most steps running at once.
    """

    def __init__(self, environment: Environment, workers: int = 8) -> None:
        require(isinstance(environment, Environment),
                f"ConcurrentSteps: environment is {type(environment).__name__}, not an Environment")
        require(workers >= 1, f"ConcurrentSteps: workers={workers} must be >= 1")
        self.environment, self.workers = environment, workers
        self._threads: ThreadPoolExecutor | None = None

    def reset(self, record: Record) -> Episode:
        return self.environment.reset(record)

    def step(self, episode: Episode, text: str) -> StepResult:
        return self.environment.step(episode, text)

    async def astep(self, episode: Episode, text: str) -> StepResult:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="lit-grpo-env-step")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self.environment.step, episode, text)

    def reward(self, episode: Episode) -> float | None:
        return self.environment.reward(episode)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_threads": None}
