"""Reading the numbers of a markdown doc's tables and comparing them with data at the digits printed."""

from __future__ import annotations

import math
import re

#: a printed number: sign (+, -, unicode minus, ±), digits, optional decimals, exponent and percent sign;
#: not a digit inside a word or a name (``pass@256``, ``tau0.1``, ``G=4`` labels are in label columns)
NUMBER = re.compile(r"(?<![\w.@])[+±-]?\d+(?:\.\d+)?(?:e-?\d+)?%?(?![\w@])")


class Pct(float):
    """A share in [0, 1] that the doc prints as a percentage (``72%``)."""


def numbers(text: str) -> list[str]:
    """The numbers of a cell or a sentence, as printed (unicode minus read as '-')."""
    return NUMBER.findall(text.replace("−", "-"))


def table(doc: str, header_start: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and the rows (cells) of the first table whose header row starts with
    ``| header_start``."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"| {header_start}")), None)
    assert start is not None, f"no table whose header starts with {header_start!r}"

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return cells(lines[start]), rows


def _digits(printed: str) -> int:
    mantissa = printed.split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


def agrees(printed: str, value) -> bool:
    """Whether ``printed`` is ``value`` rounded to the digits printed. ``None`` stands for a number that is
    no measurement (a margin, a formula's constant); a value rounded first to the 4 decimals of the
    reports is accepted too (a doc copies a report's table)."""
    if value is None:
        return True
    text = printed.lstrip("±").rstrip("%")
    x = float(value) * 100 if isinstance(value, Pct) else float(value)
    if math.isnan(x):
        return False
    if printed.startswith("+") and round(x, _digits(text)) < 0:
        return False
    if "e" in text:
        return f"{x:.{_digits(text)}e}".replace("e-0", "e-") == text.lstrip("+").replace("e-0", "e-")
    want = float(text)
    d = _digits(text)
    return any(abs(float(f"{v:.{d}f}") - want) < 10 ** -(d + 3) for v in (x, round(x, 4)))


def mismatches(printed: list[str], values: list, where: str) -> list[str]:
    """Every disagreement between a row's printed numbers and its data, as readable lines."""
    if len(printed) != len(values):
        return [f"{where}: {len(printed)} numbers printed {printed}, {len(values)} from the data"]
    return [f"{where}: printed {p}, data {v!r}" for p, v in zip(printed, values, strict=True) if not agrees(p, v)]
