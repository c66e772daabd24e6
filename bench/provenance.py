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
