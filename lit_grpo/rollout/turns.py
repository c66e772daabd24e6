"""How a multi-turn episode's next turn is generated (:func:`lit_grpo.envs.run_episodes`).

:class:`Turns`, every engine's: each turn generates from every live episode's whole token history
(:meth:`~lit_grpo.rollout.RolloutEngine.generate_ids`), so it computes the prompt, the earlier turns and the
observations again (vLLM finds those tokens in its prefix cache; the HF engine without an episode cache
computes them).

:class:`EpisodeCache`, the HF engine's: each live episode's keys and values stay between its turns, so a turn
computes only the tokens no forward has read yet: the EOS that ended the last turn, the chat template's bridge
and the observations. The group's opening prompt is prefilled once for its ``n`` episodes (the engine's shared
prefill), and an episode that ends gives its cache back at once. The samples are those of :class:`Turns` from
the same random state: the loop draws the same numbers in the same order, from logits that differ only by
the rounding of the other order of the sums. Memory is bounded: when the held caches and the turn's own would
pass the engine's ``episode_cache_mib``, the episodes of that rollout go on from their whole histories, and
the reason is logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from typing import Any

from lit_grpo.perf import Fallback
from lit_grpo.types import Rollouts, SamplingParams

#: An engine (``RolloutEngine``; ``HFGenerateEngine`` for :class:`EpisodeCache`), named loosely: the engines
#: import this module, so it imports none of theirs
Engine = Any
#: What :func:`~lit_grpo.rollout.decode.decode` keeps of a row: per layer, its keys and values ``[H, L, D]``
Kept = list

FALLBACK = Fallback(logging.getLogger(__name__), "episode cache: the episodes go on from their whole token "
                                                 "histories (each turn computes them again): %s")


class Turns:
    """The turns of one call of :func:`~lit_grpo.envs.run_episodes`: each from the whole histories."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def generate(self, episodes: list[Hashable], prompt_ids: list[list[int]], n: int,
                 sampling: SamplingParams) -> Rollouts:
        """The next turn of ``episodes`` (one key per row, group-major): ``n`` rows from each of the token
        histories ``prompt_ids``, as :meth:`~lit_grpo.rollout.RolloutEngine.generate_ids`."""
        return self.engine.generate_ids(prompt_ids, n, sampling)

    def release(self, going: Iterable[Hashable]) -> None:
        """Only the episodes ``going`` have another turn: what is held for the others is given back."""

    def close(self) -> None:
        """The episodes are over: give back everything held."""
        self.release(())


def kept_bytes(kept: Kept) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kept)


class EpisodeCache(Turns):
    """Each episode's keys and values, from one turn to its next, on the HF engine's own decoding loop.

    A row continues from what is held for its episode when the history it is given starts with the tokens held
    (always so in :func:`~lit_grpo.envs.run_episodes`, which only appends); any other row starts afresh.
    """

    def __init__(self, engine: Engine, limit_bytes: int) -> None:
        super().__init__(engine)
        self.limit_bytes = limit_bytes
        self.held: dict[Hashable, tuple[list[int], Kept]] = {}  # episode -> (its tokens held, their states)
        self.refused: str | None = None

    def generate(self, episodes: list[Hashable], prompt_ids: list[list[int]], n: int,
                 sampling: SamplingParams) -> Rollouts:
        if self.refused is None:
            self.refused = self._refusal(episodes, prompt_ids, n, sampling)
            if self.refused is not None:
                FALLBACK.say(self.refused)
                self.held.clear()
        if self.refused is not None:
            return super().generate(episodes, prompt_ids, n, sampling)
        held = [self._held(episodes[j * n], ids) if n == 1 else None for j, ids in enumerate(prompt_ids)]
        self.held.clear()  # the rows' pasts are copied into the turn's cache: what is kept replaces them
        kept: dict[int, Kept] = {}
        out = self.engine.continue_ids(prompt_ids, n, sampling, held=held, keep=kept)
        for row, states in kept.items():
            tokens = prompt_ids[row // n] + out.completion_ids[row][out.completion_mask[row]].tolist()
            self.held[episodes[row]] = (tokens[: states[0][0].shape[1]], states)
        return out

    def _held(self, episode: Hashable, ids: list[int]) -> Kept | None:
        tokens, states = self.held.get(episode, (None, None))
        return states if tokens is not None and len(tokens) < len(ids) and ids[: len(tokens)] == tokens \
            else None

    def _refusal(self, episodes: list[Hashable], prompt_ids: list[list[int]], n: int,
                 sampling: SamplingParams) -> str | None:
        """Why this turn cannot run on the cache (None when it can): another decoder, or past the bound."""
        if self.engine.decoder != "own":
            return "decoder='generate' keeps no cache from one call to the next"
        per_token = self.engine.cache_bytes_per_token()
        if per_token is None:
            return None  # found when the own loop runs: a model it does not serve keeps nothing
        rows = [ids for ids in prompt_ids for _ in range(n)]
        longest = max(len(ids) for ids in rows) + sampling.max_new_tokens
        # the turn's cache (every row padded to the longest), the copies it keeps of each row and those held
        need = per_token * (len(rows) * longest + 2 * sum(len(ids) + sampling.max_new_tokens for ids in rows))
        if need > self.limit_bytes:
            return (f"{len(episodes)} episodes of up to {longest} tokens need about {need / 2**20:.0f} MiB "
                    f"of keys and values, over episode_cache_mib={self.limit_bytes // 2**20}; raise it to "
                    "cache them, or lower the group's size or the episode's tokens")
        return None

    def release(self, going: Iterable[Hashable]) -> None:
        going = set(going)
        for episode in [e for e in self.held if e not in going]:
            del self.held[episode]
