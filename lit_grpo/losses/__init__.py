"""Policy losses: the interface, one class per loss, the maths in :mod:`lit_grpo.losses.functional`.

A loss is a component of ``GRPOModule`` chosen like the estimator: ``--model.loss=PPOClip`` and its options
``--model.loss.eps_high=0.28``.
"""

from lit_grpo.losses.base import LossInputs, LossOutput, PolicyLoss
from lit_grpo.losses.functional import AGGREGATIONS, Aggregation, token_weights
from lit_grpo.losses.ppo_clip import PPOClip

__all__ = ["PolicyLoss", "LossInputs", "LossOutput", "PPOClip", "Aggregation", "AGGREGATIONS", "token_weights"]
