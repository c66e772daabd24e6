"""The rollout-engine interface."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

from torch import nn

from lit_grpo.rollout.turns import Turns
from lit_grpo.types import PromptBatch, Rollouts, SamplingParams


class RolloutEngine(ABC):
    """Generates completions for the policy being trained.

    The module calls :meth:`bind` once the policy and tokenizer are loaded, :meth:`rollout` for every
    rollout batch and held-out batch (the completions of :meth:`generate`, unless the engine runs episodes)
    and :meth:`sync_weights` after every optimizer step. Multi-turn episodes
    (:func:`lit_grpo.envs.run_episodes`) continue token sequences with :meth:`generate_ids`, which the
    engines' ``generate`` calls after encoding, so both take one path.
    """

    #: Whether the engine holds weights of its own, loaded from the policy by :meth:`sync_weights` (vLLM's
    #: workers), rather than sampling from the policy it is bound to: an asynchronous producer, which samples
    #: from a copy of the policy, cannot run it.
    owns_weights: bool = False

    @abstractmethod
    def bind(self, policy: nn.Module, tokenizer) -> None:
        """Attach the trained policy and its tokenizer (called in ``configure_model``/``setup``)."""

    @abstractmethod
    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> Rollouts:
        """``P`` prompts -> ``P * n`` completions, group-major, with the sampling log-probs."""

    def rollout(self, batch: PromptBatch, n: int, sampling: SamplingParams) -> Rollouts:
        """``n`` rollouts of each prompt of ``batch``, group-major: the completions of its prompts. An
        engine that runs multi-turn episodes (:class:`lit_grpo.envs.EpisodeEngine`) reads the whole records
        instead."""
        return self.generate(batch.prompts, n, sampling)

    def rollout_ahead(self, batch: PromptBatch, n: int,
                      sampling: SamplingParams) -> tuple[PromptBatch, Rollouts] | None:
        """The rollouts a training step trains on, with the prompts they belong to: those of ``batch`` itself
        here; an asynchronous engine (:class:`~lit_grpo.rollout.asynchronous.AsyncRollouts`) returns an
        earlier batch's, or None while its pipeline fills."""
        return batch, self.rollout(batch, n, sampling)

    def generate_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> Rollouts:
        """``P`` token-id prompts (no padding) -> ``P * n`` completions, group-major, as :meth:`generate`.

        The ids are used exactly as given (no special tokens added), so an episode's sampled tokens are never
        re-tokenised.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not generate from token ids, which multi-turn episodes need; use "
            "HFGenerateEngine or VLLMEngine, or implement generate_ids"
        )

    def turns(self) -> Turns:
        """How :func:`lit_grpo.envs.run_episodes` generates the turns of one rollout's episodes: here each
        from the episodes' whole token histories (:meth:`generate_ids`); the HF engine keeps each episode's
        cache between its turns (:class:`~lit_grpo.rollout.turns.EpisodeCache`)."""
        return Turns(self)

    def max_sequence_length(self) -> int | None:
        """Most tokens of prompt and completion together the engine can hold (None: no known limit)."""
        return None

    def max_sampled_tokens(self, max_new_tokens: int) -> int:
        """Most tokens the policy samples in one row of :meth:`rollout` when each sampling call may sample up
        to ``max_new_tokens``: the length budget that length shaping (``OverlongPenalty``) and the
        ``seq-sum-constant`` aggregation compare lengths with. One completion: ``max_new_tokens``."""
        return max_new_tokens

    def staleness(self) -> tuple[int, str]:
        """``(max_staleness, correction)``: how many policy versions old the rollouts the trainer gets may be,
        and the importance correction that staleness asks of the loss (``"truncated_is"`` or ``"none"``; read
        once by the module, :func:`lit_grpo.losses.correction.correct_staleness`). Synchronous:
        ``(0, "none")``."""
        return 0, "none"

    def metrics(self) -> dict[str, float]:
        """Numbers the module logs after each training step (the engine's own; none here)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the engine (nothing here)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s contents. Here: say so when the checkpoint holds an asynchronous
        engine's batches in flight, which this engine does not train."""
        if state.get("pending"):
            logging.getLogger(__name__).warning(
                "the checkpoint holds %d rollout batches in flight of an asynchronous engine "
                "(AsyncRollouts); this run's %s does not train them, so their prompts are skipped. Resume "
                "with the same engine to train them",
                len(state["pending"]), type(self).__name__)

    def close(self) -> None:
        """Release what generating keeps between steps (threads, batches in flight) when a fit ends; the
        engine starts them again if it is used after. Nothing here."""
        return None

    def sync_weights(self, policy: nn.Module) -> float:
        """Load the policy's current weights into the engine; returns seconds spent.

        Engines that generate with the policy module itself have nothing to do.
        """
        return 0.0
