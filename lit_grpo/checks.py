"""Argument checks shared by the components: one helper, one kind of error."""

from __future__ import annotations


def require(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok``; the message names the option, the value and the fix."""
    if not ok:
        raise ValueError(message)


def require_at_least(where: str, minimum: int, note: str = "", **values: float) -> None:
    """``require`` that each ``option=value`` is ``>= minimum``; the message names ``where``, the option and its value,
    then ``note`` (e.g. ``" (0: never)"``)."""
    for option, value in values.items():
        require(value >= minimum, f"{where}: {option}={value} must be >= {minimum}{note}")
