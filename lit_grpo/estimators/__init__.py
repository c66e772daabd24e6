"""Advantage estimators: one class per family, one module each, the maths in
:mod:`lit_grpo.estimators.functional`.

Every module of this package is imported here (:func:`lit_grpo.components.import_package`), and each
concrete :class:`AdvantageEstimator` subclass it defines is exported under its class name
(``lit_grpo.estimators.Sign``) and listed in :data:`REGISTRY`, as :mod:`lit_grpo.losses` does for losses.
LightningCLI's short names (``--model.estimator=Sign``) and :func:`lit_grpo.components.resolve` find the same
classes. Adding an estimator is adding its module and its test; ``lit_grpo/__init__.py`` lists every public
name by name, the new class among them, so that grep and editors find ``lit_grpo.Sign``
(tests/estimators/test_estimator_contract.py fails until it does).
"""

from lit_grpo.components import import_package
from lit_grpo.estimators.base import AdvantageEstimator

#: Every estimator this package defines, by class name.
REGISTRY: dict[str, type[AdvantageEstimator]] = import_package(__name__, AdvantageEstimator)

globals().update(REGISTRY)
__all__ = ["AdvantageEstimator", *REGISTRY]
