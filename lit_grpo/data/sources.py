"""Where prompts come from: the source interface, local files and Hugging Face datasets.

Every source binds its options in a cheap constructor and reads data in :meth:`PromptSource.load` (a
list) or :meth:`PromptSource.stream` (one record at a time, for data larger than memory). Tasks with
their own prompts and reference extractors live in :mod:`lit_grpo.data.tasks` and
:mod:`lit_grpo.data.synthetic`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from lit_grpo.checks import require
from lit_grpo.data.records import (
    OnBadRow,
    Record,
    answer_text,
    bad_field,
    build_records,
    chat_messages,
    check_text,
    field_value,
    format_template,
    read_csv,
    read_jsonl,
    read_parquet,
    read_saved_dataset,
    require_fields,
)
from lit_grpo.data.templates import PromptRenderer, PromptStyle, check_style

Split = Literal["train", "val", "test"]
#: how FileSource reads a file, by suffix
READERS = {".jsonl": read_jsonl, ".json": read_jsonl, ".parquet": read_parquet, ".csv": read_csv}


def split_range(split: Split, num_val: int, num_test: int, num_train: int) -> range:
    """The rows of ``split`` in a generated set: val first, test next, train the rest (so the held-out rows do
    not move when ``num_train`` changes)."""
    start = {"val": 0, "test": num_val, "train": num_val + num_test}[split]
    size = {"val": num_val, "test": num_test, "train": num_train}[split]
    return range(start, start + size)


class PromptSource(ABC):
    """A set of prompts with references, split into train / val / test."""

    @abstractmethod
    def load(self, split: Split) -> list[Record]:
        """The records of ``split``: dicts of "prompt", "reference", "id" ("<split>-<row>"), "columns"."""

    def stream(self, split: Split, on_bad_row: OnBadRow | None = None) -> Iterator[Record]:
        """The records of ``split`` one at a time, in a fixed order; a bad row raises
        :class:`~lit_grpo.data.records.BadRowError`, or goes to ``on_bad_row`` and is skipped."""
        yield from self.load(split)

    def has_split(self, split: Split) -> bool:
        """Whether ``split`` is configured; :meth:`load` raises for a split that is not."""
        return True

    def bind_tokenizer(self, name: str) -> None:
        """Offers the policy's tokenizer (hub id or directory); sources that render chat prompts use it
        when their own ``tokenizer`` option is unset. Other sources ignore it."""
        return None

    def bind_system_prompt(self, text: str) -> None:
        """Sets the system prompt of every prompt (``data.system_prompt``); a source that does not render its
        prompts (it has no prompt style) refuses one."""
        require(not text, f"{type(self).__name__} does not render its prompts in a style, so "
                          "data.system_prompt cannot reach them; put the system prompt in the data or drop "
                          "it")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


class StyledSource(PromptSource):
    """Shared behaviour of sources that render their questions in a prompt style (see
    :mod:`lit_grpo.data.templates`); subclasses set ``style``, ``tokenizer`` and ``instruction``."""

    style: PromptStyle
    tokenizer: str | None
    instruction: str

    def bind_tokenizer(self, name: str) -> None:
        self._bound_tokenizer = name
        self._renderer = None

    def bind_system_prompt(self, text: str) -> None:
        self._system_prompt = text

    def render(self, question: str | list[dict[str, str]]) -> str:
        """The prompt for ``question`` (a text, or chat messages) in this source's style, with the system
        prompt."""
        if getattr(self, "_renderer", None) is None:
            tokenizer = self.tokenizer or getattr(self, "_bound_tokenizer", None)
            self._renderer = PromptRenderer(self.style, tokenizer)
        return self._renderer(question, self.instruction, getattr(self, "_system_prompt", ""))


class RowSource(StyledSource):
    """Shared behaviour of sources whose records come from rows with named fields.

    A row becomes a record in three steps, each a method a task may override: :meth:`question`
    (the ``template`` over the row's fields), :meth:`reference` (the answer field as text) and
    :meth:`columns` (the ``extra_fields``); the question is then rendered in the prompt ``style``. A
    prompt field that holds a list of chat messages (``[{"role": "system", "content": ...}, {"role":
    "user", ...}]``, TRL's conversational format) is the prompt as it is: the template does not apply and
    the chat template renders it. Every field option may name a nested field by a dotted path
    (``reward_model.ground_truth``).
    """

    def __init__(
        self,
        prompt_field: str,
        answer_field: str,
        template: str,
        extra_fields: list[str] | None,
        style: PromptStyle,
        tokenizer: str | None,
        instruction: str,
    ) -> None:
        check_style(type(self).__name__, style)
        self.prompt_field = prompt_field
        self.answer_field = answer_field
        self.template = template
        self.extra_fields = list(extra_fields or [])
        self.style = style
        self.tokenizer = tokenizer
        self.instruction = instruction

    def load(self, split: Split) -> list[Record]:
        return list(self.stream(split))

    @abstractmethod
    def stream(self, split: Split, on_bad_row: OnBadRow | None = None) -> Iterator[Record]:
        """The records of ``split`` read row by row (see :meth:`PromptSource.stream`)."""

    def question(self, row: dict[str, Any], where: str) -> str | list[dict[str, str]]:
        """The question text of a row (before the prompt style is applied), or its chat messages."""
        value = field_value(row, self.prompt_field)
        if isinstance(value, list):
            return chat_messages(value, where, self.prompt_field, "prompt_field")
        check_text(value, where, self.prompt_field, "prompt_field", "prompt")
        return format_template(self.template, row, where)

    def reference(self, row: dict[str, Any], where: str) -> str:
        """The reference answer of a row (a number as its canonical text, see
        :func:`~lit_grpo.data.records.answer_text`); a blank one is a bad row."""
        reference = answer_text(field_value(row, self.answer_field), where, self.answer_field, "answer_field")
        if not reference.strip():
            raise bad_field(where, self.answer_field, "answer_field", "is an empty reference")
        return reference

    def columns(self, row: dict[str, Any], where: str) -> dict[str, Any]:
        """Per-prompt values passed to the reward as keyword arguments."""
        return {f: field_value(row, f) for f in self.extra_fields}

    def required_fields(self) -> list[tuple[str, str]]:
        """``(option, field)`` pairs every row must hold (not null)."""
        fields = [("prompt_field", self.prompt_field), ("answer_field", self.answer_field)]
        return fields + [("extra_fields", f) for f in self.extra_fields]

    def record(self, row: Any, where: str, id: str) -> Record:
        """One checked record of a raw row; errors name ``where`` and the field."""
        require_fields(row, where, self.required_fields())
        question = self.question(row, where)
        reference = self.reference(row, where)
        return {
            "prompt": self.render(question),
            "reference": reference,
            "id": id,
            "columns": self.columns(row, where),
        }


class FileSource(RowSource):
    """Prompts from local JSON-lines (``.jsonl``/``.json``), Parquet (``.parquet``) or CSV (``.csv``, with a
    header line) files, or a directory written by ``datasets.Dataset.save_to_disk``.

    Files are read row by row (Parquet in batches, a saved dataset from its memory-mapped Arrow files), so
    :meth:`stream` works on files larger than memory.

    Args:
        train: File (or saved dataset directory) of the training split.
        val: File of the validation split.
        test: File of the test split.
        prompt_field: Field that holds the prompt (checked to be a non-empty string), or its chat messages.
        answer_field: Field that holds the reference answer (checked to be non-blank).
        template: ``str.format`` template over the row's fields that makes the question text,
            e.g. ``"Question: {question}\\nAnswer:"``.
        extra_fields: Further fields passed along as ``PromptBatch.columns``.
        style: Prompt style: ``plain``, ``chat`` (the tokenizer's chat template) or ``think``.
        tokenizer: Tokenizer whose chat template renders ``chat`` prompts; unset: the policy's.
        instruction: How to give the answer, appended to the question in the ``plain`` and ``chat``
            styles (e.g. ``"Put the final answer in \\\\boxed{}."``); empty for none.
    """

    def __init__(
        self,
        train: str | None = None,
        val: str | None = None,
        test: str | None = None,
        prompt_field: str = "prompt",
        answer_field: str = "answer",
        template: str = "{prompt}",
        extra_fields: list[str] | None = None,
        style: PromptStyle = "plain",
        tokenizer: str | None = None,
        instruction: str = "",
    ) -> None:
        super().__init__(
            prompt_field=prompt_field, answer_field=answer_field, template=template,
            extra_fields=extra_fields, style=style, tokenizer=tokenizer, instruction=instruction,
        )  # fmt: skip
        self.train = train
        self.val = val
        self.test = test

    def has_split(self, split: Split) -> bool:
        return getattr(self, split) is not None

    def stream(self, split: Split, on_bad_row: OnBadRow | None = None) -> Iterator[Record]:
        path = self._path(split)
        read = read_saved_dataset if path.is_dir() else READERS[path.suffix]
        rows = read(path)
        numbered = ((where, f"{split}-{i}", row) for i, (where, row) in enumerate(rows))
        yield from build_records(numbered, self.record, on_bad_row)

    def _path(self, split: Split) -> Path:
        file = getattr(self, split)
        require(file is not None, f"FileSource: no file for the {split} split; set the option `{split}` to a "
                                  "file path")
        path = Path(file)
        if path.is_dir():
            if (path / "state.json").is_file():  # Dataset.save_to_disk
                return path
            hint = (" (a DatasetDict: read it with HubSource(path=..., train_split=...))"
                    if (path / "dataset_dict.json").is_file() else "")
            raise IsADirectoryError(
                f"FileSource: {split}={file!r} is a directory that Dataset.save_to_disk did not write{hint}; "
                "give the data file in it (.jsonl, .json, .parquet or .csv)"
            )
        if not path.is_file():
            raise FileNotFoundError(f"FileSource: {split}={file!r}: no such file")
        require(path.suffix in READERS,
                f"FileSource: {split}={file!r} has suffix {path.suffix!r}; use .jsonl, .json (JSON lines), "
                ".parquet or .csv, or a directory written by Dataset.save_to_disk")
        return path


class HubSource(RowSource):
    """Prompts from a dataset loaded by ``datasets.load_dataset`` (a hub id, a local dataset
    directory, or a builder such as ``"json"``/``"parquet"`` with ``data_files``), or from a directory
    written by ``DatasetDict.save_to_disk``.

    Rows are read from the memory-mapped Arrow files one at a time, so :meth:`stream` does not hold
    the dataset in memory.

    Args:
        path: Dataset id or path, e.g. ``"openai/gsm8k"`` or ``"json"``.
        name: Dataset configuration, e.g. ``"main"``.
        train_split: Dataset split used for training.
        val_split: Dataset split used for validation; None for none (or see ``val_size``).
        test_split: Dataset split used for testing; None for none.
        prompt_field: Field that holds the question (checked to be a non-empty string).
        answer_field: Field that holds the reference answer.
        template: ``str.format`` template over the row's fields that makes the question text.
        val_size: Hold out this many training rows (a fixed, seeded choice) as the validation
            set; needs ``val_split=None``.
        data_files: Files per split for builders like ``"json"``, e.g. ``{"train": "train.jsonl"}``.
        extra_fields: Further fields passed along as ``PromptBatch.columns``.
        seed: Seed of the ``val_size`` hold-out.
        style: Prompt style: ``plain``, ``chat`` (the tokenizer's chat template) or ``think``.
        tokenizer: Tokenizer whose chat template renders ``chat`` prompts; unset: the policy's.
        instruction: How to give the answer, appended in the ``plain`` and ``chat`` styles.
    """

    def __init__(
        self,
        path: str,
        name: str | None = None,
        train_split: str = "train",
        val_split: str | None = "test",
        test_split: str | None = None,
        prompt_field: str = "question",
        answer_field: str = "answer",
        template: str = "{question}",
        val_size: int | None = None,
        data_files: dict[str, str] | None = None,
        extra_fields: list[str] | None = None,
        seed: int = 0,
        style: PromptStyle = "plain",
        tokenizer: str | None = None,
        instruction: str = "",
    ) -> None:
        require(val_size is None or (val_size >= 1 and val_split is None),
                f"{type(self).__name__}: val_size={val_size} holds out training rows and needs val_size >= 1 "
                f"and val_split=None (got val_split={val_split!r}); set val_split: null or drop val_size")
        super().__init__(
            prompt_field=prompt_field, answer_field=answer_field, template=template,
            extra_fields=extra_fields, style=style, tokenizer=tokenizer, instruction=instruction,
        )  # fmt: skip
        self.path = path
        self.name = name
        self.train_split = train_split
        self.val_split = val_split
        self.test_split = test_split
        self.val_size = val_size
        self.data_files = data_files
        self.seed = seed

    def has_split(self, split: Split) -> bool:
        return getattr(self, f"{split}_split") is not None or (split == "val" and self.val_size is not None)

    def stream(self, split: Split, on_bad_row: OnBadRow | None = None) -> Iterator[Record]:
        require(self.has_split(split),
                f"{type(self).__name__}: no dataset split for {split}; set the option `{split}_split`")
        name = getattr(self, f"{split}_split") or self.train_split
        ds = self._dataset(name)
        at = f"{self.path} [{name}], row "  # + the 1-based row number
        if self.val_size is None or split == "test":
            rows = ((f"{at}{r + 1}", f"{split}-{r}", row) for r, row in enumerate(ds))
        else:  # val: a seeded sample of the training rows; ids of training rows keep the dataset row
            require(self.val_size < len(ds),
                    f"{type(self).__name__}: val_size={self.val_size} leaves none of the {len(ds)} training "
                    "rows; lower val_size")
            held = np.random.default_rng(self.seed).permutation(len(ds))[: self.val_size].tolist()
            if split == "val":
                picked = zip(held, ds.select(held), strict=True)
                rows = ((f"{at}{r + 1}", f"val-{k}", row) for k, (r, row) in enumerate(picked))
            else:
                skip = set(held)
                rows = ((f"{at}{r + 1}", f"train-{r}", row) for r, row in enumerate(ds) if r not in skip)
        yield from build_records(rows, self.record, on_bad_row)

    def _dataset(self, split: str):
        import datasets

        try:
            if (Path(self.path) / "dataset_dict.json").is_file():
                return datasets.load_from_disk(self.path)[split]
            return datasets.load_dataset(self.path, self.name, split=split, data_files=self.data_files)
        except Exception as e:
            raise RuntimeError(
                f"{type(self).__name__}: could not load split {split!r} of dataset {self.path!r} "
                f"(name={self.name!r}): {type(e).__name__}: {e}. The dataset must be available locally "
                "(a directory, data files or the Hugging Face cache) or downloadable from the Hub."
            ) from e
