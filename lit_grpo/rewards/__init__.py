"""Reward functions: the interface, exact match, math-verify and weighted sums."""

from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.exact_match import ExactMatch
from lit_grpo.rewards.mathverify import MathVerify
from lit_grpo.rewards.scoring import STANDARD_COUNTERS, Counted, Unscorable, score_items
from lit_grpo.rewards.weighted_sum import WeightedSum

__all__ = [
    "RewardFunction",
    "ExactMatch",
    "MathVerify",
    "WeightedSum",
    "score_items",
    "Counted",
    "Unscorable",
    "STANDARD_COUNTERS",
]
