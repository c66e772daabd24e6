"""What an experiment may name: documented metrics (read from the docstrings that document them) and
advantage estimators (the classes :mod:`lit_grpo.estimators` exports).

A metric is documented by the docstring of the module or callback that writes it, as a double-backquoted
name such as ``rollout/degenerate_frac``; placeholders in angle brackets (``val/pass@<n>``,
``budget/share_<bin>``) stand for any text, and ``grad/sigma_1`` .. ``grad/sigma_5`` for the range. The
modules are always read; callbacks are read by the class paths an experiment names
(``--trainer.callbacks+=lit_grpo.callbacks.DegeneracyMonitor``), imported as LightningCLI would import them.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

_NAME = re.compile(r"``([a-z_]+/(?:[^`\s<]|<[^`>]+>)+)``")
_RANGE = re.compile(r"``([a-z_]+/[^`\s]*?)(\d+)``\s*\.\.\s*``\1(\d+)``")
_PLACEHOLDER = re.compile(r"<[^>]+>")

#: The LightningModules whose docstrings document what they log.
MODULE_CLASSES = ("lit_grpo.module.GRPOModule", "lit_grpo.policy.PolicyModule", "lit_grpo.sft.SFTModule")

#: Class path of the callback that scores an experiment's test split (added to every final run with a ``test``
#: section; named by path, so that the library does not import the callbacks package).
TEST_SPLIT_REPORT = "lit_grpo.callbacks.TestSplitReport"


@dataclass(frozen=True)
class MetricPattern:
    """A documented metric name (``pattern``, placeholders kept) and the class whose docstring lists it."""

    pattern: str
    source: str  # "module.path.ClassName"

    def matches(self, name: str) -> bool:
        parts = _PLACEHOLDER.split(self.pattern)
        regex = ".+".join(re.escape(p) for p in parts)
        return re.fullmatch(regex, name) is not None


def documented_names(doc: str) -> list[str]:
    """Metric names a docstring lists (ranges like ``grad/sigma_1`` .. ``grad/sigma_5`` expanded)."""
    names = _NAME.findall(doc)
    for stem, lo, hi in _RANGE.findall(doc):
        names.extend(f"{stem}{i}" for i in range(int(lo), int(hi) + 1))
    return list(dict.fromkeys(names))


def import_class(path: str) -> type | None:
    """The class at ``path`` (``package.module.Class`` or ``package.Class``), or None when there is none."""
    module_name, _, attr = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr) if module_name else None
    except (ImportError, AttributeError):
        return None
    return cls if inspect.isclass(cls) else None


def metric_registry(classes: Iterable[str] = ()) -> tuple[MetricPattern, ...]:
    """Every metric documented by the modules and by ``classes`` (class paths, e.g. of callbacks)."""
    return _registry(tuple(dict.fromkeys((*MODULE_CLASSES, *classes))))


@lru_cache(maxsize=32)
def _registry(paths: tuple[str, ...]) -> tuple[MetricPattern, ...]:
    patterns = []
    for cls in filter(None, map(import_class, paths)):
        source = f"{cls.__module__}.{cls.__qualname__}"
        patterns += [MetricPattern(name, source) for name in documented_names(inspect.getdoc(cls) or "")]
    return tuple(patterns)


def metric_sources(name: str, classes: Iterable[str] = ()) -> list[str]:
    """The modules and ``classes`` documenting ``name`` (empty when none does)."""
    return sorted({p.source for p in metric_registry(classes) if p.matches(name)})


def check_metric(name: str, where: str, classes: Iterable[str] = ()) -> list[str]:
    """The sources of a metric documented by the modules or ``classes``; a ValueError naming close documented
    names otherwise."""
    classes = tuple(classes)
    sources = metric_sources(name, classes)
    if sources:
        return sources
    registry = metric_registry(classes)
    prefix = name.split("/")[0] + "/"
    known = sorted({p.pattern for p in registry if p.pattern.startswith(prefix)})
    hint = ", ".join(known[:12]) if known else ", ".join(sorted({p.pattern for p in registry})[:12])
    raise ValueError(
        f"{where}: metric {name!r} is not documented by the GRPO module or a callback the experiment names "
        f"(a callback counts once its configs or args name it, e.g. --trainer.callbacks+=lit_grpo.callbacks.PassAtK); "
        f"documented names with this prefix include: {hint} (docs/diagnostics.md lists them all)"
    )


def estimator_names() -> list[str]:
    """Short names of the exported estimators (``lit_grpo.estimators.__all__`` less the interface)."""
    import lit_grpo.estimators as estimators

    return [n for n in estimators.__all__ if n != "AdvantageEstimator"]


def resolve_estimator(name: str, where: str) -> type:
    """The AdvantageEstimator class of a short name (``Sign``) or a class path (``lit_grpo.Sign``)."""
    import lit_grpo.estimators as estimators

    base = estimators.AdvantageEstimator
    if "." not in name:
        if name in estimator_names():
            return getattr(estimators, name)
        raise ValueError(
            f"{where}: unknown estimator {name!r}; choose one of {', '.join(estimator_names())} "
            "or give a class path to an AdvantageEstimator subclass"
        )
    module_name, _, attr = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(
            f"{where}: estimator class path {name!r} cannot be imported ({err}); "
            f"short names: {', '.join(estimator_names())}"
        ) from err
    if not (inspect.isclass(cls) and issubclass(cls, base) and cls is not base):
        raise ValueError(f"{where}: {name!r} is not an AdvantageEstimator subclass")
    return cls
