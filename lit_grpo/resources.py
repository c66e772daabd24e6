"""The files lit-grpo ships beside its code: built-in configs, experiment grids and the quickstart's models.

One copy of each file exists. In a clone they are the repository's top-level ``configs/``, ``experiments/`` and
``assets/``; the wheel carries the same folders as package data under ``lit_grpo/_data/`` (pyproject.toml maps
them there). :func:`root` is the folder that holds the three, whichever way lit-grpo is installed.

Names. A built-in config is named by its path under ``configs/`` without ``.yaml``: ``quickstart``,
``estimators/sign``, ``real/quickstart``; an experiment grid by its path under ``experiments/``: ``passk``. The
repository path (``configs/quickstart.yaml``, ``experiments/prepare/sft_tiny_strong.yaml``) names the same file, so
the commands written at the head of each config work installed too. A file that exists always wins over a name:
``lit-grpo fit --config quickstart`` runs ``./quickstart`` if there is such a file, else the built-in config.

Paths inside configs. A built-in experiment's configs (``base``, ``arms.*.config``, a prepare step's ``--config``)
are the built-in ones, whatever lies in the working directory. A user's experiment names its configs
relative to the working directory, else relative to its own folder, else by a built-in name (so a copied
built-in experiment runs unchanged). Models that ship with lit-grpo are named (``model: tiny-arith-sft``, see
:mod:`lit_grpo.models.sources`); every other path in a config (data files, model directories) and everything a run
writes (``runs/``, ``dirpath``) is relative to the working directory.

The older spelling ``callbacks.X`` of :mod:`lit_grpo.callbacks` works in a clone only: :func:`load_callbacks_alias`
loads the clone's top-level ``callbacks/`` (which maps it onto the same modules) where it is not on ``sys.path``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import platform
import re
import shutil
import sys
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Literal

import lit_grpo

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
    """The folder holding ``configs/``, ``experiments/`` and ``assets/``: ``lit_grpo/_data`` when installed from
    the wheel, the repository root in a clone."""
    if INSTALLED_DATA.is_dir():
        return INSTALLED_DATA
    clone = PACKAGE_DIR.parent
    if (clone / "configs").is_dir() and (clone / "experiments").is_dir():
        return clone
    raise FileNotFoundError(
        f"this lit-grpo installation has no built-in configs: neither {INSTALLED_DATA} nor a repository's configs/ "
        f"next to {PACKAGE_DIR}. Reinstall it from the wheel (pip install lit-grpo-*.whl) or from a clone"
    )


def version_line() -> str:
    """``lit-grpo 0.1.0 (python 3.11.7, torch 2.13.0+cpu, lightning 2.6.6, transformers 5.19.0)``: what
    ``lit-grpo --version`` prints and each run's ``config.yaml`` starts with."""
    found = []
    for dist in ("torch", "lightning", "transformers"):
        try:
            found.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return f"lit-grpo {lit_grpo.__version__} (python {platform.python_version()}, {', '.join(found)})"


def load_callbacks_alias() -> bool:
    """Whether ``callbacks`` is (now) the repository's alias of :mod:`lit_grpo.callbacks`: imported already, or
    loaded from the clone's top-level ``callbacks/``. False where lit-grpo is not a clone (the wheel ships no
    alias), and ``callbacks`` is then left alone (it may be an unrelated package)."""
    loaded = sys.modules.get("callbacks")
    if loaded is not None:  # imported already: the alias put lit_grpo.callbacks in its place
        return loaded is sys.modules.get("lit_grpo.callbacks")
    clone = PACKAGE_DIR.parent
    alias = clone / "callbacks" / "__init__.py"
    if INSTALLED_DATA.is_dir() or not alias.is_file():
        return False
    spec = importlib.util.spec_from_file_location("callbacks", alias, submodule_search_locations=[str(alias.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["callbacks"] = module
    try:
        spec.loader.exec_module(module)  # it replaces itself in sys.modules with lit_grpo.callbacks
    except BaseException:
        sys.modules.pop("callbacks", None)
        raise
    return sys.modules.get("callbacks") is sys.modules.get("lit_grpo.callbacks")


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
        raise ConfigNotFoundError(_not_found(name, kind, "no such file, and no built-in config of that name"))
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


def _not_found(name: str, kind: Kind, problem: str) -> str:
    close = difflib.get_close_matches(name.removesuffix(SUFFIX), names(kind), n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    return (
        f"config {name!r}: {problem}.{hint} `lit-grpo configs list` shows the built-in configs; give a path to "
        "use your own"
    )


# ---- lit-grpo configs list | show | copy ----------------------------------------------------------------------
def configs_main(argv: list[str]) -> int:
    """Runs ``lit-grpo configs ...``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="lit-grpo configs",
        description="The configs that ship with lit-grpo: list them, print one, or copy one out to edit it. "
        "Run one by name: lit-grpo fit --config quickstart; lit-grpo compare --config passk.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the built-in configs and experiment grids, with the hardware each is meant for")
    show = sub.add_parser("show", help="print a built-in config")
    show.add_argument("name", help="e.g. quickstart, estimators/sign, real/quickstart, or an experiment: passk")
    copy = sub.add_parser("copy", help="copy a built-in config to a file to edit")
    copy.add_argument("name", help="e.g. quickstart, estimators/sign, real/quickstart, or an experiment: passk")
    copy.add_argument("dest", help="the file to write (or a folder: the config's file name is kept)")
    copy.add_argument("--force", action="store_true", help="overwrite an existing file")
    args = parser.parse_args(argv)
    if args.command == "list":
        _list()
        return 0
    try:
        source = _lookup(args.name)
    except ConfigNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "show":
        print(source.read_text(), end="")
        return 0
    dest = Path(args.dest)
    if dest.is_dir():
        dest = dest / source.name
    if dest.exists() and not args.force:
        print(f"error: {dest} exists; choose another file or add --force to overwrite it", file=sys.stderr)
        return 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    command = COMMANDS["experiments" if source.parent == root() / "experiments" else "configs"]
    print(f"wrote {dest} (from the built-in {args.name}); run it with: {command} {dest}")
    return 0


def _lookup(name: str) -> Path:
    """A built-in config of either kind; a name that is both a config and an experiment must say which."""
    found = {kind: find(name, kind) for kind in COMMANDS}
    hits = {kind: path for kind, path in found.items() if path is not None}
    if len(hits) == 2 and hits["configs"] != hits["experiments"]:
        raise ConfigNotFoundError(
            f"{name!r} is both a config and an experiment; write configs/{name} or experiments/{name}"
        )
    if not hits:
        raise ConfigNotFoundError(_not_found(name, "configs", "no built-in config or experiment of that name"))
    return next(iter(hits.values()))


def _list() -> None:
    for kind, title in (("configs", "configs"), ("experiments", "experiment grids")):
        entries = names(kind)
        print(f"built-in {title} ({COMMANDS[kind]} NAME):")
        width = max(map(len, entries), default=0)
        for name in entries:
            print(f"  {name:<{width}}  {_summary(find(name, kind))}")
    print(f"\nfiles: {root()}\ncopy one to edit it: lit-grpo configs copy NAME my.yaml")


def _summary(path: Path | None, width: int = 72) -> str:
    """The first clause of a config's ``# Hardware:`` header line (what it needs to run), at most ``width``
    characters."""
    for line in (path.read_text().splitlines()[:6] if path else []):
        if line.startswith("# Hardware:"):
            text = re.split(r"(?<!e\.g)\.(?:\s|$)", line.removeprefix("# Hardware:").strip())[0]
            return text if len(text) <= width else text[: width - 3].rstrip() + "..."
    return ""
