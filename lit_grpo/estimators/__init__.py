"""Advantage estimators: one class per family, the maths in :mod:`lit_grpo.estimators.functional`."""

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

__all__ = [
    "AdvantageEstimator",
    "DrGRPO",
    "GPG",
    "GRPO",
    "MaxRL",
    "OPO",
    "PassAtK",
    "RLOO",
    "ReinforcePlusPlus",
    "Sign",
    "SignBalance",
    "SoftmaxGRPO",
]
