"""Policy losses: the interface, one class per loss, the maths in :mod:`lit_grpo.losses.functional`.

A loss is a component of ``GRPOModule`` chosen like the estimator: ``--model.loss=PPOClip`` and its options
``--model.loss.eps_high=0.28``. Every loss takes an importance ``correction`` for engine/trainer mismatch
(:mod:`lit_grpo.losses.correction`): ``--model.loss.correction=MaskedIS``.
"""

from lit_grpo.losses.base import LossInputs, LossOutput, PolicyLoss
from lit_grpo.losses.cispo import CISPO
from lit_grpo.losses.correction import ImportanceCorrection, MaskedIS, TruncatedIS
from lit_grpo.losses.functional import AGGREGATIONS, Aggregation, token_weights
from lit_grpo.losses.gmpo import GMPO
from lit_grpo.losses.gspo import GSPO
from lit_grpo.losses.ppo_clip import PPOClip
from lit_grpo.losses.sapo import SAPO

__all__ = [
    "PolicyLoss", "LossInputs", "LossOutput", "PPOClip", "GSPO", "CISPO", "SAPO", "GMPO", "ImportanceCorrection",
    "TruncatedIS", "MaskedIS", "Aggregation", "AGGREGATIONS", "token_weights",
]
