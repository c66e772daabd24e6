"""How a committed measurement records the command that made it, without a path of the machine that ran it."""

from __future__ import annotations

import os
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
