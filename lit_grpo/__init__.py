"""lit-grpo: GRPO-family reinforcement learning from verifiable rewards on PyTorch Lightning."""

from lit_grpo.data import (
    GSM8K,
    MATH500,
    FileSource,
    HubSource,
    MultipleChoice,
    PromptDataModule,
    PromptSource,
    ReferenceText,
    SyntheticArithmetic,
    SyntheticChoice,
    WordProblems,
)
from lit_grpo.estimators import GRPO, RLOO, AdvantageEstimator, DrGRPO, MaxRL, Sign, SignBalance, SoftmaxGRPO
from lit_grpo.lora import LoraSettings
from lit_grpo.module import GRPOModule
from lit_grpo.policy import PolicyModule
from lit_grpo.rewards import (
    ChoiceLetter,
    ExactMatch,
    Format,
    LastNumber,
    MathVerify,
    RewardFunction,
    TextSimilarity,
    WeightedSum,
)
from lit_grpo.rollout import HFGenerateEngine, RolloutEngine
from lit_grpo.sft import SFTModule
from lit_grpo.types import PromptBatch, RewardOutput, Rollouts, RolloutStats, SamplingParams

__version__ = "0.1.0"

__all__ = [
    "AdvantageEstimator", "GRPO", "DrGRPO", "RLOO", "Sign", "SoftmaxGRPO", "MaxRL", "SignBalance",
    "RewardFunction", "ExactMatch", "MathVerify", "WeightedSum", "ChoiceLetter", "TextSimilarity", "Format", "LastNumber",
    "RolloutEngine", "HFGenerateEngine", "LoraSettings",
    "PromptSource", "SyntheticArithmetic", "FileSource", "HubSource", "PromptDataModule",
    "GSM8K", "MATH500", "MultipleChoice", "ReferenceText", "SyntheticChoice", "WordProblems",
    "PolicyModule", "GRPOModule", "SFTModule",
    "PromptBatch", "Rollouts", "RolloutStats", "RewardOutput", "SamplingParams",
]
