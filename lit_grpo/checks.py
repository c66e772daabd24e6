"""Argument checks shared by the components: one helper, one kind of error."""

from __future__ import annotations


def require(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok``; the message names the option, the value and the fix."""
    if not ok:
        raise ValueError(message)
