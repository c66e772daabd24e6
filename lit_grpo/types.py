"""Dataclasses passed between the parts of a GRPO step.

Shape glossary (used in comments as ``# [N, T]``):

- ``P``  prompts drawn in one training step
- ``G``  completions sampled per prompt (the group size)
- ``N``  completions in the step, ``N = P * G``; completion ``i`` belongs to prompt ``i // G``
- ``Tp`` prompt tokens (left padded)
- ``T``  completion tokens (right padded)
- ``V``  vocabulary size
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


@dataclass
class PromptBatch:
    """``P`` prompts with their references and any extra per-prompt columns."""

    prompts: list[str]  # [P]
    references: list[str]  # [P]
    ids: list[str]  # [P] stable identifiers, e.g. "train-17"
    columns: dict[str, list[Any]] = field(default_factory=dict)  # name -> [P]

    def __len__(self) -> int:
        return len(self.prompts)

    def select(self, index: list[int]) -> PromptBatch:
        """The prompts at ``index``, in that order."""
        return PromptBatch(
            prompts=[self.prompts[i] for i in index],
            references=[self.references[i] for i in index],
            ids=[self.ids[i] for i in index],
            columns={k: [v[i] for i in index] for k, v in self.columns.items()},
        )

    @staticmethod
    def concat(batches: list[PromptBatch]) -> PromptBatch:
        keys = batches[0].columns.keys() if batches else []
        return PromptBatch(
            prompts=[p for b in batches for p in b.prompts],
            references=[r for b in batches for r in b.references],
            ids=[i for b in batches for i in b.ids],
            columns={k: [v for b in batches for v in b.columns[k]] for k in keys},
        )

    def repeat(self, n: int) -> PromptBatch:
        """Each prompt repeated ``n`` times in place: ``[P] -> [P * n]`` (group-major)."""
        return self.select([i for i in range(len(self)) for _ in range(n)])


@dataclass(frozen=True)
class SamplingParams:
    """How a rollout engine samples. ``temperature == 0`` means greedy decoding."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k filtering
    max_new_tokens: int = 64
    seed: int | None = None


@dataclass
class Rollouts:
    """``N = P * n`` completions of ``P`` prompts, group-major (completion ``i`` of prompt ``i // n``).

    Every engine returns this same form, so the module cannot tell engines apart.
    """

    prompt_ids: Tensor  # [N, Tp] long, left padded
    prompt_mask: Tensor  # [N, Tp] bool
    completion_ids: Tensor  # [N, T] long, right padded; EOS included when emitted
    completion_mask: Tensor  # [N, T] bool, True on generated tokens (EOS included)
    logprobs: Tensor  # [N, T] float32, the engine's log-probabilities of the sampled tokens (0 on padding)
    texts: list[str]  # [N] decoded completions, special tokens removed
    truncated: Tensor  # [N] bool, True where max_new_tokens was hit without EOS
    group_size: int = 1
    # Multi-turn episodes (lit_grpo.envs.run_episodes) only; None for single-turn rollouts. The completion is
    # then the whole episode after the prompt: assistant turns, observations and the template's tokens between
    # them.
    policy_mask: Tensor | None = None  # [N, T] bool, True only on tokens the policy sampled (the loss mask)
    episodes: list[Any] | None = None  # [N] lit_grpo.envs.Episode: messages, turns, tool counters, env reward

    @property
    def sampled_mask(self) -> Tensor:  # [N, T] bool
        """The tokens the policy sampled, the only ones the loss, the KL, the entropy and the engine
        comparison read: ``policy_mask`` for episodes, else every completion token."""
        return self.completion_mask if self.policy_mask is None else self.policy_mask

    @property
    def lengths(self) -> Tensor:  # [N]
        """Tokens the policy generated per row (an episode's observation and template tokens not counted)."""
        return self.sampled_mask.sum(-1)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    def to(self, device: torch.device | str) -> Rollouts:
        return Rollouts(
            prompt_ids=self.prompt_ids.to(device),
            prompt_mask=self.prompt_mask.to(device),
            completion_ids=self.completion_ids.to(device),
            completion_mask=self.completion_mask.to(device),
            logprobs=self.logprobs.to(device),
            texts=self.texts,
            truncated=self.truncated.to(device),
            group_size=self.group_size,
            policy_mask=None if self.policy_mask is None else self.policy_mask.to(device),
            episodes=self.episodes,
        )


@dataclass
class RewardOutput:
    """What a reward function returns for ``N`` completions."""

    scores: Tensor  # [N] float32, NaN = unscorable
    terms: dict[str, Tensor] = field(default_factory=dict)  # name -> [N], logged as reward/<name>
    # e.g. {"timeouts": 1, "errors": 0, "unscorable": 1}
    counters: dict[str, int] = field(default_factory=dict)


@dataclass
class RolloutStats:
    """Everything one training step saw, for callbacks. Tensors are detached and on the CPU."""

    batch: PromptBatch  # [P]
    texts: list[str]  # [N]
    rewards: Tensor  # [P, G], NaN = unscorable
    advantages: Tensor  # [P, G]
    lengths: Tensor  # [N] completion tokens
    truncated: Tensor  # [N] bool
    reward_terms: dict[str, Tensor] = field(default_factory=dict)  # name -> [N]
    reward_counters: dict[str, int] = field(default_factory=dict)
    num_drawn: int = 0  # prompts drawn this step, refills included
    rollouts: Rollouts | None = None  # the token ids behind ``texts`` (on the training device, detached)
    # completion tokens generated this step, groups dropped by filter_degenerate included
    tokens_drawn: int = 0

    @property
    def group_size(self) -> int:
        return self.rewards.shape[1]
