"""Reward functions: the interface, exact match, math-verify, last number, choice letters, text similarity,
format, weighted sums, rewards awaited concurrently (``AsyncReward``), LLM judges (``JudgeReward``), reward
models (``RewardModel``), the scoring helpers (item-by-item scoring, worker pools), and reward shaping by
completion length."""

from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.choice import ChoiceLetter
from lit_grpo.rewards.concurrent import AsyncReward
from lit_grpo.rewards.exact_match import ExactMatch
from lit_grpo.rewards.format import Format
from lit_grpo.rewards.judge import JudgeReward
from lit_grpo.rewards.last_number import LastNumber
from lit_grpo.rewards.mathverify import MathVerify
from lit_grpo.rewards.model import RewardModel
from lit_grpo.rewards.pool import ScoringPool
from lit_grpo.rewards.scoring import (
    STANDARD_COUNTERS,
    Counted,
    RewardGuard,
    Unscorable,
    call_reward,
    score_items,
)
from lit_grpo.rewards.shaping import OverlongPenalty, RewardShaping, ShapedRewards
from lit_grpo.rewards.similarity import TextSimilarity
from lit_grpo.rewards.weighted_sum import WeightedSum

__all__ = [
    "RewardFunction",
    "ExactMatch",
    "MathVerify",
    "LastNumber",
    "ChoiceLetter",
    "TextSimilarity",
    "Format",
    "WeightedSum",
    "AsyncReward",
    "JudgeReward",
    "RewardModel",
    "ScoringPool",
    "score_items",
    "call_reward",
    "RewardGuard",
    "Counted",
    "Unscorable",
    "STANDARD_COUNTERS",
    "RewardShaping",
    "ShapedRewards",
    "OverlongPenalty",
]
