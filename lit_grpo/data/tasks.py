"""Tasks: a dataset, its prompt templates, its reference extractor and its default reward.

(Multiple-choice tasks are in :mod:`lit_grpo.data.multiple_choice`, synthetic ones in
:mod:`lit_grpo.data.synthetic`.)

Each task reads a Hugging Face dataset (a hub id for real runs; ``path: json`` or ``parquet`` with
``data_files``, or a ``save_to_disk`` directory, for local copies in the same format) and renders its
questions in one of three prompt styles (:mod:`lit_grpo.data.templates`). A row whose reference cannot
be extracted is a bad row: an error naming the dataset, the row and the field (or, with the
DataModule's ``skip_bad_rows``, a counted skip). :meth:`default_reward` gives the reward the task is
meant to be scored with; configs name it explicitly.
"""

from __future__ import annotations

import re
from typing import Any

from lit_grpo.data.records import answer_text, bad_field
from lit_grpo.data.sources import HubSource

_GSM8K_MARK = "####"
_NUMBER_WITH_COMMAS = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")
_BOXED = ("\\boxed", "\\fbox")


def gsm8k_answer(text: str) -> str | None:
    """The final answer of a GSM8K solution: the rest of the line after the last ``####`` (digit-group
    commas removed), or None when there is none."""
    if _GSM8K_MARK not in text:
        return None
    answer = text.rsplit(_GSM8K_MARK, 1)[1].strip().split("\n", 1)[0].strip()
    if _NUMBER_WITH_COMMAS.fullmatch(answer):
        answer = answer.replace(",", "")
    return answer or None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced;
    None when there is none or it is not closed."""
    start = max(text.rfind(mark) for mark in _BOXED)
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0 or text[start:brace].strip() not in _BOXED:
        return None
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[brace + 1 : i].strip() or None
    return None


def with_format_bonus(reward, style: str):
    """``reward``, plus 0.1 × :class:`~lit_grpo.rewards.Format` where the prompts ask for ``think``."""
    from lit_grpo.rewards import Format, WeightedSum

    return WeightedSum([reward, Format()], weights=[1.0, 0.1]) if style == "think" else reward


class GSM8K(HubSource):
    """Grade-school maths word problems (``openai/gsm8k``); the reference is the number after ``####``.

    Default reward: :class:`~lit_grpo.rewards.MathVerify` (answers after ``####``, in ``\\boxed{}`` or
    in an ``<answer>`` tag); with ``style: think``, plus 0.1 × :class:`~lit_grpo.rewards.Format`.

    Validation uses the test split (limit it with the DataModule's ``max_val_prompts``).

    Args:
        path: Dataset id or local path (see :class:`HubSource`).
        name: Dataset configuration.
        test_split: Split used for testing.
        instruction: How to give the answer (``plain`` and ``chat`` styles).
        **kwargs: :class:`HubSource`'s other options (splits, ``val_size``, ``data_files``, ``extra_fields``,
            ``seed``, ``style``, ``tokenizer``); the question is the ``question`` field, the answer
            ``answer``.
    """

    def __init__(
        self,
        path: str = "openai/gsm8k",
        name: str | None = "main",
        test_split: str | None = "test",
        instruction: str = "Solve the problem step by step, then write the final answer as a number "
        "after '####'.",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            path=path, name=name, test_split=test_split, instruction=instruction, prompt_field="question",
            answer_field="answer", template="{question}", **kwargs,
        )  # fmt: skip

    def reference(self, row: dict[str, Any], where: str) -> str:
        answer = gsm8k_answer(str(row[self.answer_field]))
        if answer is None:
            raise bad_field(where, self.answer_field, "answer_field", "has no final answer after '####'")
        return answer

    def default_reward(self):
        """``MathVerify()`` (plus a format bonus with ``style: think``)."""
        from lit_grpo.rewards import MathVerify

        return with_format_bonus(MathVerify(), self.style)


class MATH500(HubSource):
    """Competition maths (``HuggingFaceH4/MATH-500``); the reference is the boxed answer.

    The reference is the ``answer`` field, or the last ``\\boxed{...}`` in it when it holds a worked
    solution (``answer_field: solution``). MATH-500 has a single split (``test``): by default it is the
    training split and ``val_size`` of its problems are held out for validation.

    Default reward: :class:`~lit_grpo.rewards.MathVerify`; with ``style: think``, plus 0.1 ×
    :class:`~lit_grpo.rewards.Format`.

    Args:
        path: Dataset id or local path (see :class:`HubSource`).
        train_split: Split used for training.
        val_split: Split used for validation; None to hold out ``val_size`` training rows.
        answer_field: ``answer`` (bare answers) or ``solution`` (the boxed answer is extracted).
        val_size: Training rows held out for validation (needs ``val_split: null``).
        instruction: How to give the answer (``plain`` and ``chat`` styles).
        **kwargs: :class:`HubSource`'s other options (``name``, ``test_split``, ``data_files``,
            ``extra_fields`` such as ``[level, subject]``, ``seed``, ``style``, ``tokenizer``); the question
            is the ``problem`` field.
    """

    def __init__(
        self,
        path: str = "HuggingFaceH4/MATH-500",
        train_split: str = "test",
        val_split: str | None = None,
        answer_field: str = "answer",
        val_size: int | None = 50,
        instruction: str = "Put the final answer within \\boxed{}.",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            path=path, train_split=train_split, val_split=val_split, answer_field=answer_field,
            val_size=val_size, instruction=instruction, prompt_field="problem", template="{problem}",
            **kwargs,
        )  # fmt: skip

    def reference(self, row: dict[str, Any], where: str) -> str:
        text = answer_text(row[self.answer_field], where, self.answer_field, "answer_field").strip()
        answer = last_boxed(text) if any(mark in text for mark in _BOXED) else text
        if not answer:
            raise bad_field(
                where, self.answer_field, "answer_field", "has no answer (empty or an unclosed \\boxed{})"
            )
        return answer

    def default_reward(self):
        """``MathVerify()`` (plus a format bonus with ``style: think``)."""
        from lit_grpo.rewards import MathVerify

        return with_format_bonus(MathVerify(), self.style)


class ReferenceText(HubSource):
    """Open-ended generation scored against a reference text (e.g. poems: a title in, a poem out).

    Default reward: :class:`~lit_grpo.rewards.TextSimilarity` (0.6 token F1 + 0.4 ROUGE-L F1), which
    with ``style: think`` scores the content of the ``<answer>`` tag.

    Args:
        path: Dataset id or local path (see :class:`HubSource`).
        val_split: Split used for validation; None to hold out ``val_size`` training rows.
        prompt_field: Field the template must use (checked to be a non-empty string).
        answer_field: Field with the reference text.
        template: ``str.format`` template over the row's fields that makes the request.
        **kwargs: :class:`HubSource`'s other options (``name``, splits, ``val_size``, ``data_files``,
            ``extra_fields``, ``seed``, ``style``, ``tokenizer``, ``instruction``: appended to the request in
            the ``plain`` and ``chat`` styles).
    """

    def __init__(
        self,
        path: str,
        val_split: str | None = None,
        prompt_field: str = "prompt",
        answer_field: str = "reference",
        template: str = "{prompt}",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            path=path, val_split=val_split, prompt_field=prompt_field, answer_field=answer_field,
            template=template, **kwargs,
        )  # fmt: skip

    def default_reward(self):
        """``TextSimilarity()``."""
        from lit_grpo.rewards import TextSimilarity

        return TextSimilarity()
