"""Rewards that wait: an ``async`` scorer per completion, awaited concurrently up to a limit.

A reward that calls out (a judge behind an HTTP endpoint, a sandbox, a remote verifier) spends its time
waiting, not computing. :class:`AsyncReward` runs its ``async def score`` for every completion of a call at
once, at most ``max_concurrency`` in flight, each under ``item_timeout_s``; the call as a whole stays under
the run's ``guards.reward_timeout_s`` (:class:`~lit_grpo.rewards.scoring.RewardGuard`). An item that raises
is NaN counted in ``errors``, one that raises :class:`~lit_grpo.rewards.scoring.Unscorable` is NaN counted
under its counter, one past its limit is NaN counted in ``timeouts``; never a silent 0.
"""

from __future__ import annotations

import asyncio
import math
import threading
from abc import abstractmethod
from collections import Counter
from typing import Any

import torch

from lit_grpo.checks import require
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.scoring import STANDARD_COUNTERS, Unscorable, _log_once, check_lengths
from lit_grpo.types import RewardOutput


class AsyncReward(RewardFunction):
    """Base class of a reward scored one completion at a time by a coroutine, awaited concurrently.

    Subclasses implement ``async def score(completion, reference, **fields) -> float``; ``fields`` holds
    the item's data columns (with ``needs_prompts``, also its ``prompt`` and ``conversation``).

    Args:
        max_concurrency: Items in flight at once.
        item_timeout_s: Wall-clock limit of one item in seconds (null: none; the call's limit still holds).
    """

    def __init__(self, max_concurrency: int = 16, item_timeout_s: float | None = 60.0) -> None:
        require(max_concurrency >= 1, f"max_concurrency={max_concurrency} must be >= 1")
        require(item_timeout_s is None or item_timeout_s > 0,
                f"item_timeout_s={item_timeout_s} must be > 0 seconds, or null for no limit of its own")
        self.max_concurrency, self.item_timeout_s = max_concurrency, item_timeout_s

    @abstractmethod
    async def score(self, completion: str, reference: str, **fields: Any) -> float:
        """One completion's score; raise ``Unscorable`` when it cannot be scored."""

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        check_lengths(completions, references, columns)
        singular = {"prompts": "prompt", "conversations": "conversation"}
        items = [{singular.get(k, k): v[i] for k, v in columns.items()} for i in range(len(completions))]
        results = _run(self._all(completions, references, items))
        scores = torch.tensor([s for s, _ in results], dtype=torch.float32)  # [N]
        counters = Counter(dict.fromkeys(STANDARD_COUNTERS, 0))
        counters.update(c for _, c in results if c is not None)
        return RewardOutput(scores=scores, terms={self.name: scores}, counters=dict(counters))

    async def _all(self, completions, references, items) -> list[tuple[float, str | None]]:
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(c: str, r: str, fields: dict) -> tuple[float, str | None]:
            async with gate:
                try:
                    value = await asyncio.wait_for(self.score(c, r, **fields), self.item_timeout_s)
                except Unscorable as exc:
                    return math.nan, exc.counter
                except asyncio.TimeoutError:
                    _log_once(self.name, "item-timeout", f"reward {self.name!r}: an item ran past "
                              f"item_timeout_s={self.item_timeout_s} s; it counts as a timeout")
                    return math.nan, "timeouts"
                except Exception as exc:
                    _log_once(self.name, "item", f"reward {self.name!r} raised on an item: "
                              f"{type(exc).__name__}: {exc}", exc)
                    return math.nan, "errors"
                return float(value), None

        return await asyncio.gather(*(one(c, r, f) for c, r, f in zip(completions, references, items,
                                                                         strict=True)))


def _run(coroutine):
    """``coroutine``'s result from a fresh event loop: this thread's when none runs in it, else a thread's
    of its own (a caller inside a running loop, such as a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
