"""Advantage estimators: one class per family, one module each, the maths in
:mod:`lit_grpo.estimators.functional`.

Each concrete :class:`AdvantageEstimator` subclass is imported here by name
(``lit_grpo.estimators.Sign``, also ``lit_grpo.Sign``) and listed in :data:`REGISTRY`, which
:func:`lit_grpo.components.import_package` builds from every module of this package. LightningCLI's short
names (``--model.estimator=Sign``) and :func:`lit_grpo.components.resolve` find the same classes. Adding an
estimator is adding its module and its name here and in ``lit_grpo/__init__.py``;
tests/estimators/test_estimator_contract.py fails until both list it.
"""

from lit_grpo.components import import_package
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

#: Every estimator this package defines, by class name.
REGISTRY: dict[str, type[AdvantageEstimator]] = import_package(__name__, AdvantageEstimator)

__all__ = [
    "AdvantageEstimator", "DrGRPO", "GPG", "GRPO", "MaxRL", "OPO", "PassAtK", "RLOO", "ReinforcePlusPlus",
    "Sign", "SignBalance", "SoftmaxGRPO",
]  # fmt: skip
