"""The files lit-grpo ships beside its code: built-in configs, experiment grids and the quickstart's models.

One copy of each file exists. In a clone they are the repository's top-level ``configs/``, ``experiments/``
and ``assets/``; the wheel carries the same folders as package data under ``lit_grpo/_data/`` (pyproject.toml
maps them there). :func:`root` is the folder that holds the three, whichever way lit-grpo is installed. How
they are named, and how the paths inside configs and experiments resolve (a file that exists always wins over
a name), is in docs/getting-started.md ("Built-in configs and paths"); ``lit-grpo configs list|show|copy``
(:mod:`lit_grpo.commands.configs`) shows and copies these files.
"""

from __future__ import annotations

import difflib
import platform
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Literal

from lit_grpo.version import __version__

PACKAGE_DIR = Path(__file__).resolve().parent
#: Where the wheel puts the shipped folders (absent in a clone).
INSTALLED_DATA = PACKAGE_DIR / "_data"

Kind = Literal["configs", "experiments"]
#: The command each kind of built-in config is for.
COMMANDS = {"configs": "lit-grpo fit --config", "experiments": "lit-grpo compare --config"}
SUFFIX = ".yaml"


class ConfigNotFoundError(FileNotFoundError):
    """A config named on the command line or in an experiment is neither a file nor a built-in config."""


def root() -> Path:
    """The folder holding ``configs/``, ``experiments/`` and ``assets/``: ``lit_grpo/_data`` when installed
    from the wheel, the repository root in a clone."""
    if INSTALLED_DATA.is_dir():
        return INSTALLED_DATA
    clone = PACKAGE_DIR.parent
    if (clone / "configs").is_dir() and (clone / "experiments").is_dir():
        return clone
    raise FileNotFoundError(
        f"this lit-grpo installation has no built-in configs: neither {INSTALLED_DATA} nor a repository's "
        f"configs/ next to {PACKAGE_DIR}. Reinstall it from the wheel (pip install lit-grpo-*.whl) or from a "
        "clone"
    )


def version_line() -> str:
    """``lit-grpo 0.2.0 (python 3.11.7, torch 2.13.0+cpu, lightning 2.6.6, transformers 5.19.0)``: what
    ``lit-grpo --version`` prints and each run's ``config.yaml`` starts with."""
    found = []
    for dist in ("torch", "lightning", "transformers"):
        try:
            found.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return f"lit-grpo {__version__} (python {platform.python_version()}, {', '.join(found)})"


def asset(name: str) -> Path:
    """The shipped folder ``assets/<name>`` (e.g. the quickstart's starting policy ``tiny-arith-sft``)."""
    return root() / "assets" / name


def names(kind: Kind) -> list[str]:
    """The built-in names of one kind. ``configs``: every config under ``configs/`` plus the experiments' own
    fit configs (``experiments/prepare/...``, by repository path); ``experiments``: the grids."""
    base = root() / kind
    if kind == "experiments":
        return sorted(p.stem for p in base.glob(f"*{SUFFIX}"))
    found = sorted(p.relative_to(base).with_suffix("").as_posix() for p in base.rglob(f"*{SUFFIX}"))
    grids = root() / "experiments"
    extra = sorted(p.relative_to(root()).with_suffix("").as_posix() for p in grids.rglob(f"*/*{SUFFIX}"))
    return found + extra


def find(name: str, kind: Kind) -> Path | None:
    """The built-in file ``name`` stands for (see the module docstring), or None."""
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        return None
    stem = str(pure)[: -len(SUFFIX)] if str(pure).endswith(SUFFIX) else str(pure)
    candidates = [root() / kind / f"{stem}{SUFFIX}"]
    if pure.parts[0] in COMMANDS:  # the repository path: configs/... or experiments/...
        candidates.append(root() / f"{stem}{SUFFIX}")
    return next((c for c in candidates if c.is_file()), None)


def is_builtin(path: str | Path) -> bool:
    """Whether ``path`` is one of the shipped configs or experiments."""
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to((root() / kind).resolve()) for kind in COMMANDS)


def resolve(name: str, kind: Kind = "configs") -> str:
    """A config given on the command line: ``name`` itself when it is a file, else the built-in config of that
    name; a :class:`ConfigNotFoundError` naming close built-in names otherwise."""
    if Path(name).expanduser().is_file():
        return name
    found = find(name, kind)
    if found is None:
        raise ConfigNotFoundError(not_found(name, kind, "no such file, and no built-in config of that name"))
    return str(found)


def resolve_in(path: str, named_in: str | Path, kind: Kind = "configs") -> str | None:
    """A config that the file ``named_in`` (an experiment) names, by the rule of the module docstring; its
    spelling is kept when it already points there from the working directory. None when there is none."""
    if is_builtin(named_in):
        found = find(path, kind)
        if found is not None:
            given = Path(path)
            return path if given.is_file() and given.resolve() == found.resolve() else str(found)
    if Path(path).expanduser().is_file():
        return path
    beside = Path(named_in).parent / path
    if beside.is_file():
        return str(beside)
    found = find(path, kind)
    return None if found is None else str(found)


def not_found(name: str, kind: Kind, problem: str) -> str:
    close = difflib.get_close_matches(name.removesuffix(SUFFIX), names(kind), n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    return (
        f"config {name!r}: {problem}.{hint} `lit-grpo configs list` shows the built-in configs; "
        "give a path to use your own"
    )
