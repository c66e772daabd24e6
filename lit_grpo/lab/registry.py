"""The metrics an experiment may name: those the modules and its callbacks declare.

Each LightningModule and callback that logs scalars declares them as data, a class attribute ``metrics:
tuple[str, ...]`` of names such as ``rollout/degenerate_frac``, where a placeholder in angle brackets
(``val/pass@<k>``, ``budget/share_<bin>``) stands for any text. A class inherits the declarations of its bases
(the MRO is walked). The modules are always read; callbacks are read by the class paths an experiment names
(``--trainer.callbacks+=lit_grpo.callbacks.DegeneracyMonitor``), imported as LightningCLI would import them.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from lit_grpo.checks import require

_PLACEHOLDER = re.compile(r"<[^>]+>")

#: The LightningModules that declare what they log.
MODULE_CLASSES = ("lit_grpo.module.GRPOModule", "lit_grpo.policy.PolicyModule", "lit_grpo.sft.SFTModule")

#: Class path of the callback that scores an experiment's test split (added to every final run with a ``test``
#: section; named by path, so that the library does not import the callbacks package).
TEST_SPLIT_REPORT = "lit_grpo.callbacks.TestSplitReport"


@dataclass(frozen=True)
class MetricPattern:
    """A declared metric name (``pattern``, placeholders kept) and the class that declares it."""

    pattern: str
    source: str  # "module.path.ClassName"

    def matches(self, name: str) -> bool:
        parts = _PLACEHOLDER.split(self.pattern)
        regex = ".+".join(re.escape(p) for p in parts)
        return re.fullmatch(regex, name) is not None


def declared_metrics(cls: type) -> list[str]:
    """The metric names and patterns ``cls`` and its bases declare in their ``metrics`` attribute, in MRO
    order."""
    names = [name for klass in cls.__mro__ for name in vars(klass).get("metrics", ())]
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
    """Every metric declared by the modules and by ``classes`` (class paths, e.g. of callbacks)."""
    return _registry(tuple(dict.fromkeys((*MODULE_CLASSES, *classes))))


@lru_cache(maxsize=32)
def _registry(paths: tuple[str, ...]) -> tuple[MetricPattern, ...]:
    patterns = []
    for cls in filter(None, map(import_class, paths)):
        for klass in cls.__mro__:  # a name is credited to the class that declares it
            source = f"{klass.__module__}.{klass.__qualname__}"
            patterns += [MetricPattern(name, source) for name in vars(klass).get("metrics", ())]
    return tuple(patterns)


def metric_sources(name: str, classes: Iterable[str] = ()) -> list[str]:
    """The modules and ``classes`` declaring ``name`` (empty when none does)."""
    return sorted({p.source for p in metric_registry(classes) if p.matches(name)})


def check_metric(name: str, where: str, classes: Iterable[str] = ()) -> list[str]:
    """The sources of a metric declared by the modules or ``classes``; a ValueError naming close declared
    names otherwise."""
    classes = tuple(classes)
    sources = metric_sources(name, classes)
    registry = metric_registry(classes)
    prefix = name.split("/")[0] + "/"
    known = sorted({p.pattern for p in registry if p.pattern.startswith(prefix)})
    hint = ", ".join(known[:12]) if known else ", ".join(sorted({p.pattern for p in registry})[:12])
    require(bool(sources),
            f"{where}: metric {name!r} is not documented by the GRPO module or a callback the experiment "
            "names (a callback counts once its configs or args name it, e.g. "
            "--trainer.callbacks+=lit_grpo.callbacks.PassAtK); "
            f"documented names with this prefix include: {hint} (docs/diagnostics.md lists them all)")
    return sources
