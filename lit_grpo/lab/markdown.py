"""How a report writes numbers and markdown tables."""

from __future__ import annotations

import math

#: What a report prints for an F or p left undefined because the runs of every cell agree (a residual of 0)
NO_WITHIN_VARIATION = "n/a: no variation within cells"


#: Significant digits a number is rounded to before it is printed: far more than a table shows, far fewer
#: than float64 holds (15 to 17), so that a last digit moved by rounding alone (another CPU, summation order)
#: never tips a printed digit at a half-way point: 0.53125 (17/32) one ULP up would print 0.5313, not 0.5312
STABLE_DIGITS = 12


def stable(x: float) -> float:
    """``x`` rounded to :data:`STABLE_DIGITS` significant digits, as it is printed from."""
    return float(f"{x:.{STABLE_DIGITS}g}") if math.isfinite(x) else x


def fmt(x: float | None, digits: int = 4) -> str:
    """Numbers for tables: fixed decimals, scientific when very small or large, "n/a" for NaN; printed from
    :func:`stable`."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    x = stable(x)
    if x != 0 and (abs(x) < 10 ** -(digits - 1) or abs(x) >= 1e5):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def fmt_df(x: float) -> str:
    """Degrees of freedom: an integer when whole."""
    if math.isnan(x):
        return "n/a"
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def fmt_p(p: float) -> str:
    """A p-value to 4 decimals (from :func:`stable`), "< 1e-4" below that, "n/a" when not defined."""
    if math.isnan(p):
        return "n/a"
    return "< 1e-4" if p < 1e-4 else f"{stable(p):.4f}"


def md_row(items) -> str:
    """One row of a markdown table: ``| a | b |``."""
    return "| " + " | ".join(str(i) for i in items) + " |"


def md_head(head: list[str], rule: str = " --- ") -> list[str]:
    """A markdown table's first two lines: the column names and the rule under them (``| --- |``, or ``|---|``
    with ``rule="---"``)."""
    return [md_row(head), "|" + f"{rule}|" * len(head)]
