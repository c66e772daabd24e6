"""How a report writes numbers and markdown tables."""

from __future__ import annotations

import math


def fmt(x: float | None, digits: int = 4) -> str:
    """Numbers for tables: fixed decimals, scientific when very small or large, "n/a" for NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x != 0 and (abs(x) < 10 ** -(digits - 1) or abs(x) >= 1e5):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def fmt_df(x: float) -> str:
    """Degrees of freedom: an integer when whole."""
    if math.isnan(x):
        return "n/a"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def fmt_p(p: float) -> str:
    return "n/a" if math.isnan(p) else ("< 1e-4" if p < 1e-4 else f"{p:.4f}")


def md_row(items) -> str:
    """One row of a markdown table: ``| a | b |``."""
    return "| " + " | ".join(str(i) for i in items) + " |"


def md_head(head: list[str], rule: str = " --- ") -> list[str]:
    """A markdown table's first two lines: the column names and the rule under them (``| --- |``, or ``|---|``
    with ``rule="---"``)."""
    return [md_row(head), "|" + f"{rule}|" * len(head)]
