"""The rollout-engine interface."""

from __future__ import annotations

from abc import ABC, abstractmethod

from torch import nn

from lit_grpo.types import PromptBatch, Rollouts, SamplingParams


class RolloutEngine(ABC):
    """Generates completions for the policy being trained.

    The module calls :meth:`bind` once the policy and tokenizer are loaded, :meth:`rollout` for every
    rollout batch and held-out batch (the completions of :meth:`generate`, unless the engine runs episodes) and
    :meth:`sync_weights` after every optimizer step. Multi-turn episodes
    (:func:`lit_grpo.envs.run_episodes`) continue token sequences with :meth:`generate_ids`, which the
    engines' ``generate`` calls after encoding, so both take one path.
    """

    @abstractmethod
    def bind(self, policy: nn.Module, tokenizer) -> None:
        """Attach the trained policy and its tokenizer (called in ``configure_model``/``setup``)."""

    @abstractmethod
    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> Rollouts:
        """``P`` prompts -> ``P * n`` completions, group-major, with the sampling log-probs."""

    def rollout(self, batch: PromptBatch, n: int, sampling: SamplingParams) -> Rollouts:
        """``n`` rollouts of each prompt of ``batch``, group-major: the completions of its prompts. An engine that
        runs multi-turn episodes (:class:`lit_grpo.envs.EpisodeEngine`) reads the whole records instead."""
        return self.generate(batch.prompts, n, sampling)

    def generate_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> Rollouts:
        """``P`` token-id prompts (no padding) -> ``P * n`` completions, group-major, as :meth:`generate`.

        The ids are used exactly as given (no special tokens added), so an episode's sampled tokens are never
        re-tokenised.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not generate from token ids, which multi-turn episodes need; use "
            "HFGenerateEngine or VLLMEngine, or implement generate_ids"
        )

    def max_sequence_length(self) -> int | None:
        """Most tokens of prompt and completion together the engine can hold (None: no known limit)."""
        return None

    def sync_weights(self, policy: nn.Module) -> float:
        """Load the policy's current weights into the engine; returns seconds spent.

        Engines that generate with the policy module itself have nothing to do.
        """
        return 0.0
