"""Advantage estimators: one class per family, one module each, the maths in :mod:`lit_grpo.estimators.functional`.

Every module of this package is imported here, and each concrete :class:`AdvantageEstimator` subclass it defines
is exported under its class name (``lit_grpo.estimators.Sign``, ``lit_grpo.Sign``) and listed in
:data:`REGISTRY`. LightningCLI's short names (``--model.estimator=Sign``) and
:func:`lit_grpo.components.resolve` find the same classes, so adding an estimator is adding its module: no list
names it.
"""

from lit_grpo.components import import_package
from lit_grpo.estimators.base import AdvantageEstimator

#: Every estimator this package defines, by class name.
REGISTRY: dict[str, type[AdvantageEstimator]] = import_package(__name__, AdvantageEstimator)

globals().update(REGISTRY)
__all__ = ["AdvantageEstimator", *REGISTRY]
