"""How a committed measurement records the command that made it, without a path of the machine that ran it, and
how a doc holds the block a bench renders from its data."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def portable(path: str | os.PathLike) -> str:
    """``path`` as a reader can rerun it: relative to the working directory or the repository when under one of
    them, else its name alone (a folder of another machine means nothing to the reader)."""
    given = Path(path)
    if not given.is_absolute():
        return str(given)
    for base in (Path.cwd(), ROOT):
        if given.is_relative_to(base):
            return str(given.relative_to(base))
    return given.name


def command(script: str, argv: list[str]) -> str:
    """``python <script> <argv>`` with every absolute path (an argument or an ``--option=value``) made portable."""
    def arg(a: str) -> str:
        key, eq, value = a.partition("=")
        if eq and key.startswith("-"):
            return f"{key}={portable(value)}" if value.startswith("/") else a
        return portable(a) if a.startswith("/") else a

    return " ".join(["python", script, *map(arg, argv)])


def doc_block(doc: str, begin: str, end: str) -> str:
    """The text of ``doc`` between the markers ``begin`` and ``end`` (what a bench's ``--write`` put there)."""
    return doc[doc.index(begin) + len(begin) : doc.index(end)]


def write_block(path: Path, begin: str, end: str, text: str) -> None:
    """Replace the text between the markers ``begin`` and ``end`` of the file ``path`` with ``text``."""
    doc = path.read_text()
    start, stop = doc.index(begin) + len(begin), doc.index(end)
    path.write_text(doc[:start] + text + doc[stop:])


def code_commit(code: Path = ROOT) -> str:
    """The commit checked out at ``code``, ``-dirty`` when its ``lit_grpo`` (the code measured) differs from it."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(code), *args], capture_output=True, text=True)

    dirty = git("diff", "--quiet", "HEAD", "--", "lit_grpo").returncode != 0
    return git("rev-parse", "--short=12", "HEAD").stdout.strip() + ("-dirty" if dirty else "")


def code_env(code: Path | None, **extra: str) -> dict[str, str]:
    """This process's environment with ``code``'s ``lit_grpo`` first on the import path (None: unchanged) and
    ``extra`` variables set: for a child that measures another checkout."""
    env = {**os.environ, **extra}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


#: The values a recorded setting may hold (anything else is recorded by its class and constructor arguments).
_PLAIN = (str, int, float, bool, type(None))


def resolved_settings(args: list[str]) -> dict:
    """The settings ``lit-grpo fit <args>`` runs with, run from the repository: the parsed config (every option,
    defaults included) and each component the module builds itself where the config names none (the rollout
    engine), as its class and the constructor arguments it holds. A published number records these so that a
    test can tell when a changed default no longer gives it (:func:`changed_settings`)."""
    import yaml

    from lit_grpo.cli import LitGRPOCLI

    here = Path.cwd()
    os.chdir(ROOT)
    try:
        cli = LitGRPOCLI(args=list(args), run=False)
        config = yaml.safe_load(cli.parser.dump(cli.config, skip_none=False))
    finally:
        os.chdir(here)
    return {"config": config, "engine": _component(cli.model.engine)}


def _component(obj, depth: int = 0) -> dict:
    import inspect

    out = {"class": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    for name, parameter in inspect.signature(type(obj).__init__).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if not hasattr(obj, name):
            continue
        value = getattr(obj, name)
        if isinstance(value, _PLAIN) or (isinstance(value, list | tuple) and all(isinstance(v, _PLAIN) for v in value)):
            out[name] = list(value) if isinstance(value, tuple) else value
        elif depth < 3 and type(value).__module__.startswith("lit_grpo."):  # a component it holds
            out[name] = _component(value, depth + 1)
    return out


def changed_settings(recorded: dict, current: dict, prefix: str = "") -> list[str]:
    """The dotted keys of ``recorded`` whose value ``current`` no longer holds (options added since are not
    compared: a new option keeps the old behaviour at its default, or its change is a change of a recorded one)."""
    changed = []
    for key, value in recorded.items():
        where = f"{prefix}{key}"
        if key not in current:
            changed.append(f"{where} (gone)")
        elif isinstance(value, dict) and isinstance(current[key], dict):
            changed += changed_settings(value, current[key], where + ".")
        elif value != current[key]:
            changed.append(f"{where}: {value!r} -> {current[key]!r}")
    return changed
