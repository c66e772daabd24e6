"""Argument checks shared by the components: one helper, one kind of error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def require(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok``; the message names the option, the value and the fix."""
    if not ok:
        raise ValueError(message)


def require_at_least(where: str, minimum: int, note: str = "", **values: float) -> None:
    """``require`` that each ``option=value`` is ``>= minimum``; the message names ``where``, the option and
    its value, then ``note`` (e.g. ``" (0: never)"``)."""
    for option, value in values.items():
        require(value >= minimum, f"{where}: {option}={value} must be >= {minimum}{note}")


def require_folder(option: str, path: str | os.PathLike) -> None:
    """``require`` that ``path`` is, or can be made, a folder this process writes in: the nearest part of it
    that exists is a folder (not a file) and writable. Nothing is created; the message names ``option`` and
    the path."""
    given = Path(path)
    for part in (given.absolute(), *given.absolute().parents):
        if part.exists():
            require(part.is_dir(), f"{option}={str(given)!r}: {part} is a file, not a folder; choose another "
                    f"{option} or move the file")
            require(
                os.access(part, os.W_OK | os.X_OK),
                f"{option}={str(given)!r}: this process cannot write in {part}; choose a writable {option}",
            )
            return


def differences(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """``<prefix>key: checkpoint X, this run Y`` for each key of ``current`` that ``saved`` holds with another
    value (a key only one of them has is not compared: older checkpoints lack newer settings)."""
    def show(value: Any) -> str:
        return value if isinstance(value, str) else repr(value)

    return [f"{prefix}{k}: checkpoint {show(saved[k])}, this run {show(current[k])}"
            for k in current if k in saved and saved[k] != current[k]]
