"""lit-grpo: GRPO-family reinforcement learning from verifiable rewards on PyTorch Lightning."""

from lit_grpo.data import FileSource, HubSource, PromptDataModule, PromptSource, SyntheticArithmetic
from lit_grpo.estimators import GRPO, RLOO, AdvantageEstimator, DrGRPO, MaxRL, Sign, SignBalance, SoftmaxGRPO
from lit_grpo.module import GRPOModule
from lit_grpo.policy import PolicyModule
from lit_grpo.rewards import ExactMatch, MathVerify, RewardFunction, WeightedSum
from lit_grpo.rollout import HFGenerateEngine, RolloutEngine
from lit_grpo.sft import SFTModule
from lit_grpo.types import PromptBatch, RewardOutput, Rollouts, RolloutStats, SamplingParams

__version__ = "0.1.0"

__all__ = [
    "AdvantageEstimator", "GRPO", "DrGRPO", "RLOO", "Sign", "SoftmaxGRPO", "MaxRL", "SignBalance",
    "RewardFunction", "ExactMatch", "MathVerify", "WeightedSum",
    "RolloutEngine", "HFGenerateEngine",
    "PromptSource", "SyntheticArithmetic", "FileSource", "HubSource", "PromptDataModule",
    "PolicyModule", "GRPOModule", "SFTModule",
    "PromptBatch", "Rollouts", "RolloutStats", "RewardOutput", "SamplingParams",
]
