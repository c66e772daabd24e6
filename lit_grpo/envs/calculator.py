"""A calculator tool that parses arithmetic itself: model text is never run as code.

The expression is parsed with ``ast.parse(mode="eval")`` and the tree walked node by node; only numeric
literals, ``+ - * / // % **``, unary ``+``/``-`` and parentheses are accepted. Names, calls, attributes,
subscripts, lambdas, strings, comparisons and everything else are refused with a message, and so are
exponents above :data:`MAX_EXPONENT` and results above :data:`MAX_MAGNITUDE`, so no input can make it run long
or build huge numbers.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_CHARS = 200  # longest expression accepted
MAX_EXPONENT = 64  # largest |exponent| of **
MAX_MAGNITUDE = 10**30  # largest |value| of any intermediate result

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class CalculatorError(ValueError):
    """An expression the calculator refuses; the message says why."""


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / // % ** and parentheses.

    Args:
        expression: The arithmetic expression, for example "(12 + 3) * 47".
    """
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be text, got {type(expression).__name__}")
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"expression is {len(expression)} characters long; at most {MAX_CHARS} "
                              "are accepted")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as err:
        raise CalculatorError(f"not an arithmetic expression: {err.msg}") from None
    return _format(_value(tree.body))


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            return _bounded(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError(f"the result exceeds {MAX_MAGNITUDE:.0e}") from None
    raise CalculatorError(f"{type(node).__name__} is not allowed: only numbers, + - * / // % ** "
                          "and parentheses")


def _check_power(base: int | float, exponent: int | float) -> None:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent} is too large; at most {MAX_EXPONENT} in magnitude")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) > math.log10(MAX_MAGNITUDE):
        raise CalculatorError(f"the result exceeds {MAX_MAGNITUDE:.0e}")


def _bounded(value: int | float | complex) -> int | float:
    if isinstance(value, complex):
        raise CalculatorError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"the result exceeds {MAX_MAGNITUDE:.0e}")
    return value


def _format(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    return str(int(value)) if value.is_integer() else f"{value:.12g}"
