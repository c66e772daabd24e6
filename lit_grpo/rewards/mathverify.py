"""Mathematical equivalence of final answers, checked with the ``math-verify`` package."""

from __future__ import annotations

import math
import re
import threading
from typing import Any, Literal

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException

from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.scoring import Counted, Unscorable, score_items
from lit_grpo.types import RewardOutput

AnswerFormat = Literal["auto", "gsm8k", "boxed"]
_FORMATS = ("auto", "gsm8k", "boxed")
_GSM8K_MARK = "####"
_BOXED_MARK = "\\boxed"
_MARKS: dict[str, tuple[str, ...]] = {
    "auto": (_GSM8K_MARK, _BOXED_MARK),
    "gsm8k": (_GSM8K_MARK,),
    "boxed": (_BOXED_MARK,),
}
# A GSM8K final answer that is a number, possibly with a currency sign, commas and trailing words.
_NUMBER = re.compile(r"\s*\$?\s*(-?(?:\d[\d,]*)?\.?\d+)(?![\w^/])")
_ANY = (LatexExtractionConfig(), ExprExtractionConfig())
_BOXED = (LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=False),)


def _last_mark(text: str, marks: tuple[str, ...]) -> tuple[str, int] | None:
    """The answer marker that occurs last in ``text`` and its position, or None."""
    found = max(((text.rfind(mark), mark) for mark in marks if mark in text), default=None)
    return None if found is None else (found[1], found[0])


def _parse_text(text: str, timeout: int | None) -> list:
    """Parses a bare answer ("42", "1,000", "\\frac{1}{2}", "x^2+1") into math-verify's form."""
    number = _NUMBER.match(text)
    if number and not text[number.end() :].strip().startswith(("\\", "^", "/", "{")):
        return parse(number.group(1), list(_ANY), parsing_timeout=timeout, raise_on_error=True)
    wrapped = text if "$" in text else f"${text}$"
    parsed = parse(wrapped, list(_ANY), parsing_timeout=timeout, raise_on_error=True)
    if _is_parsed(parsed):
        return parsed
    return parse(text, list(_ANY), parsing_timeout=timeout, raise_on_error=True)


def _is_parsed(answer: list) -> bool:
    """Whether math-verify parsed something beyond its raw-string fallback."""
    return any(not isinstance(item, str) for item in answer)


def extract_answer(text: str, answer_format: AnswerFormat, timeout: int | None, bare: bool) -> list:
    """The parsed final answer of ``text`` ([] when none is found).

    The last answer marker the format recognises decides: after ``####`` the rest of that line, from
    ``\\boxed`` the boxed expression. Without a marker, ``text`` is read as a bare answer when
    ``bare`` (references), and as no answer otherwise (completions).
    """
    found = _last_mark(text, _MARKS[answer_format])
    if found is None:
        return _parse_text(text.strip(), timeout) if bare and text.strip() else []
    mark, start = found
    if mark == _GSM8K_MARK:
        line = text[start + len(mark) :].strip().split("\n", 1)[0].strip()
        return _parse_text(line, timeout) if line else []
    return parse(text[start:], list(_BOXED), parsing_timeout=timeout, raise_on_error=True)


class MathVerify(RewardFunction):
    """1.0 when the completion's final answer is mathematically equivalent to the reference's.

    Completions give their final answer GSM8K-style (``#### 42``) or as LaTeX ``\\boxed{...}``;
    references are a bare answer (``42``, ``\\frac{1}{2}``), a GSM8K solution ending in ``#### 42``,
    or a solution containing ``\\boxed{...}``. Scores and counters:

    - 1.0 equivalent; 0.0 wrong, or no answer found in the completion (counted in ``no_answer``);
    - NaN when the reference has no parsable answer (``unscorable``), when parsing or verification
      raised (``errors``), or ran past ``timeout_s`` (``timeouts``).

    Timeouts use math-verify's own SIGALRM mechanism, which only works in the main thread; there
    ``timeout_s`` bounds each parse and each comparison. In any other thread the timeouts are
    disabled (a comparison may then take as long as sympy needs): to bound time there, run the reward
    in a worker-process pool, which can be stopped from the outside.

    Args:
        answer_format: Which final-answer markers count: ``"gsm8k"`` (``####``), ``"boxed"``
            (``\\boxed{}``) or ``"auto"`` (either; the last one in the text wins).
        timeout_s: Time limit of each parse and comparison in the main thread, in seconds (> 0;
            rounded up to whole seconds, as SIGALRM counts whole seconds).
    """

    def __init__(self, answer_format: AnswerFormat = "auto", timeout_s: float = 5.0) -> None:
        if answer_format not in _FORMATS:
            raise ValueError(f"answer_format={answer_format!r} is not supported; use one of {_FORMATS}")
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s={timeout_s!r} must be a finite number of seconds > 0, e.g. 5.0")
        self.answer_format = answer_format
        self.timeout_s = timeout_s

    def _timeout(self) -> int | None:
        """math-verify's timeout argument: whole seconds in the main thread, None (off) elsewhere."""
        if threading.current_thread() is threading.main_thread():
            return math.ceil(self.timeout_s)
        return None

    def _reference(self, reference: str | None, cache: dict, timeout: int | None) -> list:
        """The parsed reference answer, parsed once per distinct reference and call."""
        if reference is None or not str(reference).strip():
            raise Unscorable("unscorable", "empty reference")
        if reference not in cache:
            try:
                cache[reference] = extract_answer(reference, self.answer_format, timeout, bare=True)
            except (Exception, TimeoutException) as exc:
                cache[reference] = exc
        gold = cache[reference]
        if isinstance(gold, BaseException):
            raise gold
        if not _is_parsed(gold):
            raise Unscorable("unscorable", f"no parsable answer in reference {reference!r}")
        return gold

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` -> scores ``[N]`` in {0, 1}, NaN where unscorable."""
        timeout = self._timeout()
        cache: dict[str, list | BaseException] = {}

        def score(completion: str, reference: str | None) -> float | Counted:
            gold = self._reference(reference, cache, timeout)
            answer = extract_answer(completion, self.answer_format, timeout, bare=False)
            if not _is_parsed(answer):
                return Counted(0.0, "no_answer")
            return float(verify(gold, answer, timeout_seconds=timeout, raise_on_error=True))

        return score_items(score, completions, references, name=self.name, counter_keys=("no_answer",))
