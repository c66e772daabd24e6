"""Rollout engines: the interface and the Hugging Face ``generate`` engine."""

from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.hf import HFGenerateEngine

__all__ = ["RolloutEngine", "HFGenerateEngine"]
