"""Where a search agent's correct answer came from: a document its searches returned, or a guess.

SignBalance's argument (Wang et al., METHODS.md) is that GRPO credits a lone correct completion with a large
advantage whatever produced it, so a correct guess is reinforced as strongly as a correct answer found by the
tool: a spurious advantage. In a search episode the source of an answer can be read off the conversation: each
question has the document that holds its answer (``doc_id`` in the shipped collection's records), and a search
result shows each document it returns under its id (``[doc-012] Title: text``,
:class:`~lit_grpo.envs.search.SearchEnvironment`). A correct answer is **found** when an observation of the
episode showed that document, and a **guess** otherwise: with no tool call at all, or after calls none of
which returned it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from lit_grpo.checks import require

Source = Literal["found", "guess_no_search", "guess_not_returned", "wrong"]

#: The record column holding the id of the document that answers the question.
DOC_FIELD = "doc_id"


def returned_document(messages: Sequence[dict[str, Any]], doc_id: str) -> bool:
    """Whether an observation (a message after the first assistant turn that is not itself an assistant turn)
    shows the document ``doc_id`` in the search results' form ``[doc_id]``."""
    require(bool(doc_id), "returned_document: doc_id is empty; the record names no answering document")
    marker = f"[{doc_id}]"
    seen_assistant = False
    for message in messages:
        if message.get("role") == "assistant":
            seen_assistant = True
        elif seen_assistant and marker in str(message.get("content", "")):
            return True
    return False


def answer_source(messages: Sequence[dict[str, Any]], tool_calls: int, correct: bool, doc_id: str) -> Source:
    """Where one episode's answer came from: ``wrong`` (not correct), ``found`` (an observation showed the
    answering document), ``guess_no_search`` (correct with no tool call) or ``guess_not_returned`` (correct
    after tool calls none of which returned the document)."""
    require(tool_calls >= 0, f"answer_source: tool_calls={tool_calls} must be >= 0")
    if not correct:
        return "wrong"
    if returned_document(messages, doc_id):
        return "found"
    return "guess_no_search" if tool_calls == 0 else "guess_not_returned"


def guess_summary(sources: Sequence[Source], returned: Sequence[bool],
                  advantages: Sequence[float] | None = None) -> dict[str, float]:
    """The ``episode/…`` scalars of one step's episodes (docs/diagnostics.md, ``SearchGuesses``).

    Shares are over all ``sources``; ``guess_share_of_correct`` is over the correct ones (NaN: none); with
    ``advantages`` (one per episode), the mean advantage of the guesses and of the found answers (NaN: none).
    ``returned``: per episode, whether an observation showed the answering document, correct or not.
    """
    n = len(sources)
    require(len(returned) == n, f"guess_summary: {len(returned)} returned flags for {n} episodes")
    require(advantages is None or len(advantages) == n,
            f"guess_summary: {0 if advantages is None else len(advantages)} advantages for {n} episodes")
    if n == 0:
        return {}
    guess = [s in ("guess_no_search", "guess_not_returned") for s in sources]
    correct = sum(s != "wrong" for s in sources)
    out = {
        "episode/guess_frac": sum(guess) / n,
        "episode/guess_no_search_frac": sum(s == "guess_no_search" for s in sources) / n,
        "episode/guess_not_returned_frac": sum(s == "guess_not_returned" for s in sources) / n,
        "episode/found_frac": sum(s == "found" for s in sources) / n,
        "episode/doc_returned_frac": sum(bool(r) for r in returned) / n,
        "episode/guess_share_of_correct": sum(guess) / correct if correct else math.nan,
    }
    if advantages is not None:
        out["episode/guess_advantage_mean"] = _mean([a for a, g in zip(advantages, guess, strict=True) if g])
        out["episode/found_advantage_mean"] = _mean(
            [a for a, s in zip(advantages, sources, strict=True) if s == "found"])
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan
