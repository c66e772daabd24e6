"""Mathematical equivalence of final answers, checked with the ``math-verify`` package."""

from __future__ import annotations

import math
import re
import threading
from functools import lru_cache
from typing import Any, Literal

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from math_verify.errors import TimeoutException

from lit_grpo.checks import require
from lit_grpo.rewards.base import RewardFunction
from lit_grpo.rewards.pool import PooledScorer, StartMethod
from lit_grpo.rewards.scoring import Counted, Unscorable, score_items
from lit_grpo.types import RewardOutput

AnswerFormat = Literal["auto", "gsm8k", "boxed", "tag"]
_FORMATS = ("auto", "gsm8k", "boxed", "tag")
_GSM8K_MARK = "####"
_BOXED_MARK = "\\boxed"
_TAG_OPEN, _TAG_CLOSE = "<answer>", "</answer>"
_MARKS: dict[str, tuple[str, ...]] = {
    "auto": (_GSM8K_MARK, _BOXED_MARK, _TAG_OPEN),
    "gsm8k": (_GSM8K_MARK,),
    "boxed": (_BOXED_MARK,),
    "tag": (_TAG_OPEN,),
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
    ``\\boxed`` the boxed expression, in ``<answer>...</answer>`` the tag's content read as a bare
    answer. Without a marker, ``text`` is read as a bare answer when ``bare`` (references), and as no
    answer otherwise (completions).
    """
    found = _last_mark(text, _MARKS[answer_format])
    if found is None:
        return _parse_text(text.strip(), timeout) if bare and text.strip() else []
    mark, start = found
    if mark == _GSM8K_MARK:
        line = text[start + len(mark) :].strip().split("\n", 1)[0].strip()
        return _parse_text(line, timeout) if line else []
    if mark == _TAG_OPEN:
        content = text[start + len(mark) :].split(_TAG_CLOSE, 1)[0].strip()
        return _parse_text(content, timeout) if content else []
    return parse(text[start:], list(_BOXED), parsing_timeout=timeout, raise_on_error=True)


@lru_cache(maxsize=4096)
def _parsed_reference(
    reference: str, answer_format: AnswerFormat, timeout: int | None
) -> list | BaseException:
    """A reference's parsed answer, or the exception parsing it raised (cached: a group shares it)."""
    try:
        return extract_answer(reference, answer_format, timeout, bare=True)
    except (Exception, TimeoutException) as exc:
        return exc


class MathVerify(PooledScorer, RewardFunction):
    """1.0 when the completion's final answer is mathematically equivalent to the reference's.

    Completions give their final answer GSM8K-style (``#### 42``), as LaTeX ``\\boxed{...}`` or inside
    ``<answer>...</answer>``; references are a bare answer (``42``, ``\\frac{1}{2}``), a GSM8K solution
    ending in ``#### 42``, or a solution containing ``\\boxed{...}``. Scores and counters:

    - 1.0 equivalent; 0.0 wrong, or no answer found in the completion (counted in ``no_answer``);
    - NaN when the reference has no parsable answer (``unscorable``), when parsing or verification
      raised (``errors``), or ran past its time limit (``timeouts``).

    Time limits: in a main thread ``timeout_s`` bounds each parse and comparison (math-verify's SIGALRM
    timeout, disabled in other threads). With ``workers > 0`` a pool of worker processes scores the items,
    each with ``timeout_s`` and a wall-clock limit ``wall_timeout_s``: a worker hung past it (in C code, say)
    is killed, its item counted in ``timeouts`` and the pool recreated; a worker that dies counts its item in
    ``errors``.

    Args:
        answer_format: Which final-answer markers count: ``"gsm8k"`` (``####``), ``"boxed"``
            (``\\boxed{}``), ``"tag"`` (``<answer>``) or ``"auto"`` (any; the last one in the text wins).
        timeout_s: Time limit of each parse and comparison in a main thread, in seconds (> 0;
            rounded up to whole seconds, as SIGALRM counts whole seconds).
        workers: Worker processes scoring the items (0: score in the calling process).
        wall_timeout_s: Wall-clock limit of one item in a worker, in seconds; None: ``3 × timeout_s + 1``
            (a reference parse, an answer parse and a comparison).
        start_method: How workers start: ``forkserver`` or ``spawn``.
    """

    binary = True

    def __init__(
        self,
        answer_format: AnswerFormat = "auto",
        timeout_s: float = 5.0,
        workers: int = 0,
        wall_timeout_s: float | None = None,
        start_method: StartMethod = "forkserver",
    ) -> None:
        require(answer_format in _FORMATS,
                f"answer_format={answer_format!r} is not supported; use one of {_FORMATS}")
        require(isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0,
                f"timeout_s={timeout_s!r} must be a finite number of seconds > 0, e.g. 5.0")
        require(wall_timeout_s is None or (math.isfinite(wall_timeout_s) and wall_timeout_s > 0),
                f"wall_timeout_s={wall_timeout_s!r} must be a number of seconds > 0, or null")
        self.check_pool(workers, start_method)
        self.answer_format = answer_format
        self.timeout_s = timeout_s
        self.wall_timeout_s = wall_timeout_s

    def pool_timeout_s(self) -> float:
        return self.wall_timeout_s if self.wall_timeout_s is not None else 3 * self.timeout_s + 1

    def _timeout(self) -> int | None:
        """math-verify's timeout argument: whole seconds in the main thread, None (off) elsewhere."""
        if threading.current_thread() is threading.main_thread():
            return math.ceil(self.timeout_s)
        return None

    def score_item(self, completion: str, reference: str | None, **row: Any) -> float | Counted:
        """One item: 1.0 / 0.0, ``Counted(0.0, "no_answer")``, or raises (unscorable, timeout, error)."""
        if reference is None or not str(reference).strip():
            raise Unscorable("unscorable", "empty reference")
        timeout = self._timeout()
        gold = _parsed_reference(str(reference), self.answer_format, timeout)
        if isinstance(gold, BaseException):
            raise gold
        if not _is_parsed(gold):
            raise Unscorable("unscorable", f"no parsable answer in reference {reference!r}")
        answer = extract_answer(completion, self.answer_format, timeout, bare=False)
        if not _is_parsed(answer):
            return Counted(0.0, "no_answer")
        return float(verify(gold, answer, timeout_seconds=timeout, raise_on_error=True))

    def __call__(self, completions: list[str], references: list[str], **columns: Any) -> RewardOutput:
        """``completions [N]``, ``references [N]`` -> scores ``[N]`` in {0, 1}, NaN where unscorable."""
        return score_items(
            self.score_item,
            completions,
            references,
            name=self.name,
            counter_keys=("no_answer",),
            pool=self.pool,
        )
