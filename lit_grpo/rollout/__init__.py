"""Rollout engines: the interface, the Hugging Face ``generate`` engine and the vLLM engine.

``lit_grpo.rollout.vllm`` imports vLLM only when an engine is bound, so importing lit_grpo never imports
vLLM, and ``--model.engine=VLLMEngine`` resolves on machines without it (construction then names the extra).
"""

from lit_grpo.rollout.asynchronous import AsyncRollouts
from lit_grpo.rollout.base import RolloutEngine
from lit_grpo.rollout.hf import HFGenerateEngine
from lit_grpo.rollout.vllm import VLLMEngine

__all__ = ["AsyncRollouts", "RolloutEngine", "HFGenerateEngine", "VLLMEngine"]
