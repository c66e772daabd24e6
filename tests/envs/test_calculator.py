"""The calculator parses arithmetic itself and refuses everything else, code above all."""

from __future__ import annotations

import pytest

from lit_grpo.envs.calculator import MAX_EXPONENT, CalculatorError, calculator


@pytest.mark.parametrize("expression, value", [
    ("2+3*4", "14"), ("(2+3)*4", "20"), ("-7 // 2", "-4"), ("7 % 3", "1"), ("2**10", "1024"),
    ("1/4", "0.25"), ("6/3", "2"), ("- -3", "3"), ("123456789 * 987654321", "121932631112635269"),
    (" 1.5 * 4 ", "6"), ("2 ** -1", "0.5"),
])
def test_arithmetic(expression, value):
    assert calculator(expression) == value


CODE_LIKE = [
    "__import__('os').system('x')", "open('/etc/passwd')", "(lambda: 1)()", "lambda x: x", "(1).__class__",
    "().__class__.__bases__[0].__subclasses__()", "exec('1')", "eval('1+1')", "x", "[1, 2]", "'a' * 3",
    "1 if 1 else 2", "1 < 2", "not 1", "~1", "1 & 3", "1 << 3", "f'{1}'", "{1: 2}", "print(1)", "a := 1",
    "import os", "1; 2", "True + 1", "...", "1j * 1j",
]


@pytest.mark.parametrize("expression", CODE_LIKE)
def test_code_like_input_is_refused(expression):
    with pytest.raises(CalculatorError):
        calculator(expression)


@pytest.mark.parametrize("expression, reason", [
    ("9 ** 9 ** 9", "too large"), (f"2 ** {MAX_EXPONENT + 1}", "too large"), ("10 ** 40", "exceeds"),
    ("1e20 * 1e20", "exceeds"), ("1e400", "finite"), ("9" * 40, "exceeds"), ("1" + "+1" * 150, "characters"),
    ("1 / 0", "division by zero"), ("5 % 0", "division by zero"), ("0 ** -1", "division by zero"),
    ("(-8) ** 0.5", "real number"), ("", "not an arithmetic expression"),
])
def test_bounds_and_errors(expression, reason):
    with pytest.raises(CalculatorError, match=reason):
        calculator(expression)
