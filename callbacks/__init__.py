"""``callbacks``: the older spelling of :mod:`lit_grpo.callbacks`, kept for configs that name ``callbacks.X``.

In a clone of the repository (this folder sits next to ``lit_grpo/``) ``class_path: callbacks.HeldOutReport`` and
``from callbacks.export import SavePretrained`` keep working. The wheel does not ship this folder: installed,
the callbacks are spelled ``lit_grpo.callbacks.X`` (a top-level ``callbacks`` package belongs to an unrelated
project on the package registry).

Nothing is imported twice: ``callbacks`` *is* ``lit_grpo.callbacks`` and ``callbacks.<submodule>`` *is*
``lit_grpo.callbacks.<submodule>`` (the same module objects, registered under both names in ``sys.modules``),
so a class has one identity and ``isinstance`` checks hold whichever spelling a config used.
"""

import importlib
import pkgutil
import sys

import lit_grpo.callbacks as _target

for _info in pkgutil.iter_modules(_target.__path__):
    sys.modules[f"{__name__}.{_info.name}"] = importlib.import_module(f"{_target.__name__}.{_info.name}")
sys.modules[__name__] = _target
