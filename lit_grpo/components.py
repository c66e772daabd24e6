"""Turning a name into a component class: the one resolution every command uses.

LightningCLI resolves ``--model.estimator=Sign`` or ``class_path: lit_grpo.Sign`` through jsonargparse: a
dotted path is imported, a short name is looked up among the imported, concrete subclasses of the argument's
type. The experiment loader (``lit-grpo compare``) and the weight-curve command (``lit-grpo curves``) name
components too; they resolve through :func:`resolve` below, which is that same jsonargparse lookup, so every
command accepts the same names and nothing keeps a list of them by hand. A component is registered by being
imported: the packages of lit-grpo's own components import every module they hold (see
:mod:`lit_grpo.estimators`), and a user's class counts once its module is imported or named by its dotted
path.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

# jsonargparse's own resolution, as LightningCLI applies it to class_path values (one import site)
from jsonargparse._typehints import get_all_subclass_paths, resolve_class_path_by_name
from jsonargparse._util import import_object

from lit_grpo.checks import require


def subclasses(base: type) -> dict[str, type]:
    """The concrete, public subclasses of ``base`` imported so far, by short name (in the order found); a
    name that two classes share maps to neither (give their class paths). A class made at run time, which no
    path imports (Lightning wraps each optimizer in one), is not a choice and is left out."""
    found: dict[str, list[type]] = {}
    for path in get_all_subclass_paths(base):
        try:
            cls = import_object(path)
        except (ImportError, AttributeError):
            continue
        found.setdefault(cls.__name__, [])
        if cls not in found[cls.__name__]:
            found[cls.__name__].append(cls)
    return {name: classes[0] for name, classes in found.items() if len(classes) == 1}


def resolve(base: type, name: str, where: str) -> type:
    """The subclass of ``base`` that ``name`` (a short name such as ``Sign``, or a class path such as
    ``lit_grpo.Sign``) names, as LightningCLI resolves it; a ValueError that starts with ``where`` and lists
    the valid short names otherwise."""
    known = ", ".join(sorted(subclasses(base)))
    try:
        path = resolve_class_path_by_name(base, name)
    except ValueError as err:  # a short name two subclasses share
        raise ValueError(f"{where}: {err}") from None
    require("." in path, f"{where}: unknown {base.__name__} {name!r}; choose one of {known}, or give the "
            f"class path of a subclass of {base.__name__} (my_pkg.module.MyClass)")
    try:
        cls = import_object(path)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"{where}: {name!r} cannot be imported ({err}); short names: {known}") from None
    require(inspect.isclass(cls) and issubclass(cls, base) and not inspect.isabstract(cls),
            f"{where}: {name!r} is not a concrete {base.__name__} subclass; choose one of {known}")
    return cls


def import_package(package: str, base: type) -> dict[str, type]:
    """Import every module of ``package`` (a package of lit-grpo's own components), which registers the
    subclasses of ``base`` they define, and return the concrete, public ones by class name, sorted (what the
    package exports)."""
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        module = importlib.import_module(f"{package}.{info.name}")
        for name, obj in vars(module).items():
            defined_here = inspect.isclass(obj) and obj.__module__ == module.__name__
            if (
                defined_here
                and issubclass(obj, base)
                and not inspect.isabstract(obj)
                and not name.startswith("_")
            ):
                found[name] = obj
    return dict(sorted(found.items()))
