"""lit-grpo: GRPO-family reinforcement learning from verifiable rewards on PyTorch Lightning.

Every public name is imported here by name, so ``import lit_grpo`` loads torch and Lightning. The maths
(``lit_grpo.estimators``, ``lit_grpo.losses``, ``lit_grpo.logprobs``, ``lit_grpo.diagnostics``) does not
import Lightning itself; tests/test_layers.py checks that with this file bypassed. Each estimator, loss and
importance correction its package registers is exported under its class name (``lit_grpo.Sign``); a test
fails until a newly registered one is listed here.
"""

from lit_grpo.data import (
    GSM8K,
    MATH500,
    FileSource,
    HubSource,
    MixedSource,
    MultipleChoice,
    PromptCurriculum,
    PromptDataModule,
    PromptSource,
    ReferenceText,
    SyntheticArithmetic,
    SyntheticChoice,
    SyntheticResidue,
    WordProblems,
)
from lit_grpo.data.reasoning_gym import ReasoningGymScore, ReasoningGymSource
from lit_grpo.estimators.base import AdvantageEstimator
from lit_grpo.estimators.drgrpo import DrGRPO
from lit_grpo.estimators.gpg import GPG
from lit_grpo.estimators.grpo import GRPO
from lit_grpo.estimators.maxrl import MaxRL
from lit_grpo.estimators.opo import OPO
from lit_grpo.estimators.passk import PassAtK
from lit_grpo.estimators.reinforce_pp import ReinforcePlusPlus
from lit_grpo.estimators.rloo import RLOO
from lit_grpo.estimators.sign import Sign
from lit_grpo.estimators.sign_balance import SignBalance
from lit_grpo.estimators.softmax import SoftmaxGRPO
from lit_grpo.lora import LoraSettings
from lit_grpo.losses.base import PolicyLoss
from lit_grpo.losses.cispo import CISPO
from lit_grpo.losses.correction import ImportanceCorrection, MaskedIS, TruncatedIS
from lit_grpo.losses.gmpo import GMPO
from lit_grpo.losses.gspo import GSPO
from lit_grpo.losses.ppo_clip import PPOClip
from lit_grpo.losses.sapo import SAPO
from lit_grpo.module import GRPOModule
from lit_grpo.policy import PolicyModule
from lit_grpo.rewards import (
    ChoiceLetter,
    ExactMatch,
    Format,
    LastNumber,
    MathVerify,
    OverlongPenalty,
    RewardFunction,
    RewardShaping,
    TextSimilarity,
    WeightedSum,
)
from lit_grpo.rollout import AsyncRollouts, HFGenerateEngine, RolloutEngine
from lit_grpo.sft import SFTModule
from lit_grpo.types import PromptBatch, RewardOutput, Rollouts, RolloutStats, SamplingParams
from lit_grpo.version import __version__ as __version__  # lit_grpo/version.py: readable without this file

__all__ = [
    # the modules
    "GRPOModule", "SFTModule", "PolicyModule", "LoraSettings",
    # advantage estimators (lit_grpo.estimators.REGISTRY)
    "AdvantageEstimator", "DrGRPO", "GPG", "GRPO", "MaxRL", "OPO", "PassAtK", "RLOO", "ReinforcePlusPlus",
    "Sign", "SignBalance", "SoftmaxGRPO",
    # policy losses and importance corrections (lit_grpo.losses.REGISTRY)
    "PolicyLoss", "CISPO", "GMPO", "GSPO", "PPOClip", "SAPO", "ImportanceCorrection", "MaskedIS",
    "TruncatedIS",
    # rewards
    "RewardFunction", "ExactMatch", "MathVerify", "WeightedSum", "ChoiceLetter", "TextSimilarity", "Format",
    "RewardShaping", "OverlongPenalty", "LastNumber",
    # rollouts
    "AsyncRollouts", "RolloutEngine", "HFGenerateEngine",
    # data
    "PromptSource", "SyntheticArithmetic", "FileSource", "HubSource", "MixedSource", "PromptDataModule",
    "GSM8K", "MATH500", "MultipleChoice", "ReferenceText", "SyntheticChoice", "SyntheticResidue",
    "PromptCurriculum", "WordProblems", "ReasoningGymSource", "ReasoningGymScore",
    # what passes between the parts
    "PromptBatch", "Rollouts", "RolloutStats", "RewardOutput", "SamplingParams",
]  # fmt: skip
