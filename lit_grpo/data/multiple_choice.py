"""Multiple-choice questions with letter answers: the bounded-answer case of the tasks."""

from __future__ import annotations

import re
import string
from typing import Any

from lit_grpo.data.records import bad_field
from lit_grpo.data.sources import HubSource
from lit_grpo.data.tasks import with_format_bonus
from lit_grpo.data.templates import format_options

_LETTERED = re.compile(r"^\s*\(?([A-Za-z])\s*[).:]\s*(.*)$", re.DOTALL)


def _option_texts(options: Any, where: str, field: str) -> list[str]:
    """Option texts without their letter labels (``"A)21"`` -> ``"21"``); at least two."""
    if not isinstance(options, list) or len(options) < 2 or len(options) > 26:
        raise bad_field(where, field, "options_field", f"must be a list of 2 to 26 options, got {options!r}")
    texts = []
    for i, option in enumerate(options):
        text = str(option)
        labelled = _LETTERED.match(text)
        if labelled and labelled.group(1).upper() == string.ascii_uppercase[i]:
            text = labelled.group(2)
        texts.append(text.strip())
    return texts


def choice_letter(answer: Any, num_choices: int) -> str | None:
    """The option letter of an answer given as a letter (``"C"``, ``"(c)"``) or a 0-based index."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return string.ascii_uppercase[answer] if 0 <= answer < num_choices else None
    letter = str(answer).strip().strip("()").strip().upper()
    return letter if len(letter) == 1 and letter in string.ascii_uppercase[:num_choices] else None


class MultipleChoice(HubSource):
    """Multiple-choice questions with letter answers (AQuA-RAT: ``deepmind/aqua_rat``).

    The prompt lists the options as ``A) ...``, ``B) ...`` (labels already in the data, like AQuA's
    ``"A)21"``, are replaced); the reference is the correct letter, given in the data as a letter or a
    0-based index. With k options, guessing succeeds 1/k of the time; each record carries the column
    ``num_choices`` (k). Default reward: :class:`~lit_grpo.rewards.ChoiceLetter`; with ``style:
    think``, plus 0.1 × :class:`~lit_grpo.rewards.Format`.

    Args:
        path: Dataset id or local path (see :class:`HubSource`).
        name: Dataset configuration.
        val_split: Split used for validation.
        test_split: Split used for testing.
        prompt_field: Field with the question.
        options_field: Field with the list of options.
        answer_field: Field with the correct letter or 0-based index.
        instruction: How to give the answer (``plain`` and ``chat`` styles).
        **kwargs: :class:`HubSource`'s other options (``train_split``, ``val_size``, ``data_files``,
            ``extra_fields``, ``seed``, ``style``, ``tokenizer``).
    """

    def __init__(
        self,
        path: str = "deepmind/aqua_rat",
        name: str | None = "raw",
        val_split: str | None = "validation",
        test_split: str | None = "test",
        prompt_field: str = "question",
        options_field: str = "options",
        answer_field: str = "correct",
        instruction: str = "Answer with the letter of the correct option.",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            path=path, name=name, val_split=val_split, test_split=test_split, prompt_field=prompt_field,
            answer_field=answer_field, instruction=instruction, template=f"{{{prompt_field}}}", **kwargs,
        )  # fmt: skip
        self.options_field = options_field

    def required_fields(self) -> list[tuple[str, str]]:
        return [*super().required_fields(), ("options_field", self.options_field)]

    def question(self, row: dict[str, Any], where: str) -> str:
        options = _option_texts(row[self.options_field], where, self.options_field)
        return super().question(row, where) + "\n" + format_options(options)

    def reference(self, row: dict[str, Any], where: str) -> str:
        k = len(row[self.options_field])
        letter = choice_letter(row[self.answer_field], k)
        if letter is None:
            raise bad_field(
                where, self.answer_field, "answer_field",
                f"is {row[self.answer_field]!r}, not one of the {k} options {string.ascii_uppercase[:k]} "
                "(a letter or a 0-based index)",
            )  # fmt: skip
        return letter

    def columns(self, row: dict[str, Any], where: str) -> dict[str, Any]:
        return {**super().columns(row, where), "num_choices": len(row[self.options_field])}

    def default_reward(self):
        """``ChoiceLetter()`` (plus a format bonus with ``style: think``)."""
        from lit_grpo.rewards import ChoiceLetter

        return with_format_bonus(ChoiceLetter(), self.style)
