"""Policy losses: the interface, one class per loss, the maths in :mod:`lit_grpo.losses.functional`.

A loss is a component of ``GRPOModule`` chosen like the estimator: ``--model.loss=PPOClip`` and its options
``--model.loss.eps_high=0.28``. Every loss takes an importance ``correction`` for engine/trainer mismatch
(:mod:`lit_grpo.losses.correction`): ``--model.loss.correction=MaskedIS``.

Every module of this package is imported here, and each concrete :class:`PolicyLoss` and
:class:`ImportanceCorrection` subclass it defines is exported under its class name and listed in
:data:`REGISTRY`: adding a loss is adding its module.
"""

from lit_grpo.components import import_package
from lit_grpo.losses.base import LossInputs, LossOutput, PolicyLoss
from lit_grpo.losses.correction import ImportanceCorrection
from lit_grpo.losses.functional import AGGREGATIONS, Aggregation, token_weights

#: Every loss and importance correction this package defines, by class name.
REGISTRY: dict[str, type] = {
    **import_package(__name__, PolicyLoss),
    **import_package(__name__, ImportanceCorrection),
}

globals().update(REGISTRY)
__all__ = [
    "PolicyLoss", "LossInputs", "LossOutput", "ImportanceCorrection", "Aggregation", "AGGREGATIONS",
    "token_weights",
    *REGISTRY,
]  # fmt: skip
