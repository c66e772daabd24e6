"""What an experiment may name: documented metrics (read from the docstrings that document them) and
advantage estimators (the classes :mod:`lit_grpo.estimators` exports).

A metric is documented by the docstring of the module or callback that writes it, as a double-backquoted
name such as ``rollout/degenerate_frac``; placeholders in angle brackets (``val/pass@<n>``,
``budget/share_<bin>``) stand for any text, and ``grad/sigma_1`` .. ``grad/sigma_5`` for the range.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from functools import lru_cache

_NAME = re.compile(r"``([a-z_]+/(?:[^`\s<]|<[^`>]+>)+)``")
_RANGE = re.compile(r"``([a-z_]+/[^`\s]*?)(\d+)``\s*\.\.\s*``\1(\d+)``")
_PLACEHOLDER = re.compile(r"<[^>]+>")


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


def _documenting_classes() -> list[type]:
    import callbacks
    import lit_grpo

    classes = [lit_grpo.GRPOModule, lit_grpo.PolicyModule, lit_grpo.SFTModule]
    classes += [getattr(callbacks, name) for name in callbacks.__all__]
    return [c for c in classes if inspect.isclass(c)]


@lru_cache(maxsize=1)
def metric_registry() -> tuple[MetricPattern, ...]:
    """Every documented metric of the modules and callbacks, with the class that writes it."""
    patterns = []
    for cls in _documenting_classes():
        source = f"{cls.__module__}.{cls.__qualname__}"
        patterns += [MetricPattern(name, source) for name in documented_names(inspect.getdoc(cls) or "")]
    return tuple(patterns)


def metric_sources(name: str) -> list[str]:
    """Classes documenting ``name`` (empty when it is not a documented metric)."""
    return sorted({p.source for p in metric_registry() if p.matches(name)})


def check_metric(name: str, where: str) -> list[str]:
    """The sources of a documented metric; a ValueError naming close documented names otherwise."""
    sources = metric_sources(name)
    if sources:
        return sources
    prefix = name.split("/")[0] + "/"
    known = sorted({p.pattern for p in metric_registry() if p.pattern.startswith(prefix)})
    hint = ", ".join(known[:12]) if known else ", ".join(sorted({p.pattern for p in metric_registry()})[:12])
    raise ValueError(
        f"{where}: metric {name!r} is not documented by the GRPO module or any callback; documented names "
        f"with this prefix include: {hint} (docs/diagnostics.md lists them all)"
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
