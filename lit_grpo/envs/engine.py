"""EpisodeEngine: the rollout engine of multi-turn training, an environment in front of a sampling engine."""

from __future__ import annotations

from torch import nn

from lit_grpo.checks import require
from lit_grpo.envs.base import Environment
from lit_grpo.envs.chat import ChatFormat
from lit_grpo.envs.rollout import TruncatedReward, check_truncated_reward, records_of, run_episodes
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.hf import HFGenerateEngine
from lit_grpo.types import PromptBatch, Rollouts, SamplingParams


class EpisodeEngine(RolloutEngine):
    """Multi-turn episodes: the policy acts, ``environment`` answers, until each episode is done.

    Configured as the module's engine (``model.engine: {class_path: lit_grpo.envs.EpisodeEngine, init_args:
    {environment: ..., engine: ...}}``); the training step, held-out scoring and the callbacks then see whole
    episodes in the usual :class:`~lit_grpo.types.Rollouts`: the prompt, then every assistant turn,
    observation and template bridge token as the completion, with ``policy_mask`` marking the tokens the
    policy sampled (the only ones the loss, the KL, the entropy and the engine comparison read). The texts the
    reward scores are the final assistant turns; an environment that owns the reward (``Environment.reward``)
    replaces it. Each turn samples up to ``sampling.max_new_tokens`` tokens. See docs/agents.md.

    Args:
        environment: Answers each assistant turn (``ToolEnvironment``, ``SearchEnvironment``,
            ``EnvironmentRouter``, ... or your own :class:`~lit_grpo.envs.Environment`).
        engine: Samples each turn from token ids (default ``HFGenerateEngine()``; ``VLLMEngine`` works too).
        max_turns: Most assistant turns per episode; an episode still going after them ends truncated.
        max_episode_tokens: Most tokens after the prompt (assistant turns, observations and template tokens
            together); null: only the engine's context limits them.
        truncated_reward: The reward of an episode cut before it answered (its last turn was a tool call, or
            asked for another turn, when ``max_turns`` or the token budget ended it): a number (default 0),
            ``score`` (scored as usual, its last turn read as the answer) or ``drop`` (unscorable: NaN, left
            out of its group's statistics with advantage 0). Logged as ``env/unanswered_frac``.
        max_observation_tokens: Longest observation (a tool result, an environment's message) in tokens of the
            policy's tokenizer; a longer one is cut to its first ``max_observation_tokens`` tokens and ends
            with ``[result cut at N tokens]``. Null: no cap beyond the environment's own.
    """

    def __init__(self, environment: Environment, engine: RolloutEngine | None = None, max_turns: int = 4,
                 max_episode_tokens: int | None = None, truncated_reward: TruncatedReward = 0.0,
                 max_observation_tokens: int | None = None) -> None:
        require(max_turns >= 1, f"max_turns={max_turns} must be >= 1")
        require(max_episode_tokens is None or max_episode_tokens >= 1,
                f"max_episode_tokens={max_episode_tokens} must be >= 1, or null for no limit")
        self.environment = environment
        self.engine = engine if engine is not None else HFGenerateEngine()
        self.max_turns, self.max_episode_tokens = max_turns, max_episode_tokens
        self.truncated_reward = check_truncated_reward(truncated_reward)
        require(max_observation_tokens is None or max_observation_tokens >= 1,
                f"max_observation_tokens={max_observation_tokens} must be >= 1, or null for no cap")
        self.max_observation_tokens = max_observation_tokens
        self.tokenizer = None
        self.chat: ChatFormat | None = None

    def bind(self, policy: nn.Module, tokenizer) -> None:
        self.engine.bind(policy, tokenizer)
        self.tokenizer, self.chat = tokenizer, ChatFormat(tokenizer)

    def rollout(self, batch: PromptBatch, n: int, sampling: SamplingParams) -> Rollouts:
        """``n`` episodes of each record of ``batch`` (its prompt, reference and columns), group-major."""
        require(self.chat is not None, "EpisodeEngine.rollout() called before bind(policy, tokenizer)")
        return run_episodes(self.engine, self.tokenizer, records_of(batch), self.environment, n, sampling,
                            self.max_turns, self.max_episode_tokens, self.chat, self.truncated_reward,
                            self.max_observation_tokens)

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> Rollouts:
        """Episodes of bare prompts (no reference, no columns)."""
        batch = PromptBatch(prompts=list(prompts), references=[""] * len(prompts),
                            ids=[str(i) for i in range(len(prompts))])
        return self.rollout(batch, n, sampling)

    def generate_ids(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams) -> Rollouts:
        return self.engine.generate_ids(prompt_ids, n, sampling)

    def max_sequence_length(self) -> int | None:
        return self.engine.max_sequence_length()

    def max_sampled_tokens(self, max_new_tokens: int) -> int:
        """The episode's length budget: the most tokens the policy samples in one episode, ``max_turns`` turns
        of ``max_new_tokens``, and no more than ``max_episode_tokens`` (which counts observations too)."""
        most = self.max_turns * max_new_tokens
        return most if self.max_episode_tokens is None else min(most, self.max_episode_tokens)

    def sync_weights(self, policy: nn.Module) -> float:
        return self.engine.sync_weights(policy)
