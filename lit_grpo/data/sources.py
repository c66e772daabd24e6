"""Where prompts come from: a synthetic arithmetic task, local files, Hugging Face datasets.

Every source binds its options in a cheap constructor and reads data in :meth:`PromptSource.load`.
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from lit_grpo.data.records import Record, make_record, read_jsonl, read_parquet

Split = Literal["train", "val", "test"]
_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


class PromptSource(ABC):
    """A set of prompts with references, split into train / val / test."""

    @abstractmethod
    def load(self, split: Split) -> list[Record]:
        """The records of ``split``: dicts with "prompt", "reference", "id" ("<split>-<row>") and "columns"."""

    def has_split(self, split: Split) -> bool:
        """Whether ``split`` is configured; :meth:`load` raises for a split that is not."""
        return True

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class SyntheticArithmetic(PromptSource):
    """Prompts ``"{a}{op}{b}="`` with ``a, b`` in ``0..max_operand``; the reference is the result.

    All distinct ``(a, op, b)`` problems are put in one seeded order; val takes the first
    ``num_val``, test the next ``num_test`` and train the next ``num_train``, so the splits are
    disjoint and the hold-out sets do not move when ``num_train`` changes.

    Args:
        num_train: Training problems (the defaults use all 10000 problems of two-digit addition).
        num_val: Validation problems.
        num_test: Test problems.
        max_operand: Largest operand (the difficulty knob).
        operators: Operators to draw from, any of "+", "-", "*" (e.g. "+-").
        seed: Seed of the order of problems.
    """

    def __init__(
        self,
        num_train: int = 9600,
        num_val: int = 200,
        num_test: int = 200,
        max_operand: int = 99,
        operators: str = "+",
        seed: int = 0,
    ) -> None:
        for name, value in [("num_train", num_train), ("num_val", num_val), ("num_test", num_test)]:
            if value < 0:
                raise ValueError(f"SyntheticArithmetic: {name}={value} must be >= 0")
        if max_operand < 0:
            raise ValueError(f"SyntheticArithmetic: max_operand={max_operand} must be >= 0")
        if not operators or set(operators) - set(_OPERATORS) or len(set(operators)) != len(operators):
            raise ValueError(
                f"SyntheticArithmetic: operators={operators!r} must be distinct characters from "
                f"{''.join(_OPERATORS)!r}, e.g. '+' or '+-*'"
            )
        space = len(operators) * (max_operand + 1) ** 2
        wanted = num_train + num_val + num_test
        if wanted > space:
            raise ValueError(
                f"SyntheticArithmetic: num_train + num_val + num_test = {num_train} + {num_val} + {num_test} "
                f"= {wanted} exceeds the {space} distinct problems with max_operand={max_operand} and "
                f"operators={operators!r}; raise max_operand, add operators or lower the split sizes"
            )
        self.num_train = num_train
        self.num_val = num_val
        self.num_test = num_test
        self.max_operand = max_operand
        self.operators = operators
        self.seed = seed

    def load(self, split: Split) -> list[Record]:
        start, size = {
            "val": (0, self.num_val),
            "test": (self.num_val, self.num_test),
            "train": (self.num_val + self.num_test, self.num_train),
        }[split]
        m = self.max_operand + 1
        gen = torch.Generator().manual_seed(self.seed)
        order = torch.randperm(len(self.operators) * m * m, generator=gen)[start : start + size]
        records = []
        for row, code in enumerate(order.tolist()):
            op, a, b = self.operators[code // (m * m)], code // m % m, code % m
            records.append(
                {
                    "prompt": f"{a}{op}{b}=",
                    "reference": str(_OPERATORS[op](a, b)),
                    "id": f"{split}-{row}",
                    "columns": {},
                }
            )
        return records


class FileSource(PromptSource):
    """Prompts from local JSON-lines (``.jsonl``/``.json``) or Parquet (``.parquet``) files.

    Args:
        train: File of the training split.
        val: File of the validation split.
        test: File of the test split.
        prompt_field: Field that holds the prompt (checked to be a non-empty string).
        answer_field: Field that holds the reference answer.
        template: ``str.format`` template over the row's fields that makes the prompt text,
            e.g. ``"Question: {question}\\nAnswer:"``.
        extra_fields: Further fields passed along as ``PromptBatch.columns``.
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
    ) -> None:
        self.train = train
        self.val = val
        self.test = test
        self.prompt_field = prompt_field
        self.answer_field = answer_field
        self.template = template
        self.extra_fields = list(extra_fields or [])

    def has_split(self, split: Split) -> bool:
        return getattr(self, split) is not None

    def load(self, split: Split) -> list[Record]:
        file = getattr(self, split)
        if file is None:
            raise ValueError(
                f"FileSource: no file for the {split} split; set the option `{split}` to a file path"
            )
        path = Path(file)
        if not path.is_file():
            raise FileNotFoundError(f"FileSource: {split}={file!r}: no such file")
        if path.suffix in (".jsonl", ".json"):
            rows = read_jsonl(path)
        elif path.suffix == ".parquet":
            rows = read_parquet(path)
        else:
            raise ValueError(
                f"FileSource: {split}={file!r} has suffix {path.suffix!r}; use .jsonl, .json (JSON lines) or .parquet"
            )
        return [self._record(row, where, f"{split}-{i}") for i, (where, row) in enumerate(rows)]

    def _record(self, row: dict[str, Any], where: str, id: str) -> Record:
        return make_record(
            row,
            id=id,
            where=where,
            prompt_field=self.prompt_field,
            answer_field=self.answer_field,
            template=self.template,
            extra_fields=self.extra_fields,
        )


class HubSource(PromptSource):
    """Prompts from a dataset loaded by ``datasets.load_dataset`` (a hub id, a local dataset
    directory, or a builder such as ``"json"`` with ``data_files``), or from a directory written by
    ``DatasetDict.save_to_disk``.

    Args:
        path: Dataset id or path, e.g. ``"openai/gsm8k"`` or ``"json"``.
        name: Dataset configuration, e.g. ``"main"``.
        train_split: Dataset split used for training.
        val_split: Dataset split used for validation; None for none (or see ``val_size``).
        test_split: Dataset split used for testing; None for none.
        prompt_field: Field that holds the question (checked to be a non-empty string).
        answer_field: Field that holds the reference answer.
        template: ``str.format`` template over the row's fields that makes the prompt text.
        val_size: Hold out this many training rows (a fixed, seeded choice) as the validation
            set; needs ``val_split=None``.
        data_files: Files per split for builders like ``"json"``, e.g. ``{"train": "train.jsonl"}``.
        extra_fields: Further fields passed along as ``PromptBatch.columns``.
        seed: Seed of the ``val_size`` hold-out.
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
    ) -> None:
        if val_size is not None and (val_size < 1 or val_split is not None):
            raise ValueError(
                f"HubSource: val_size={val_size} holds out training rows and needs val_size >= 1 and "
                f"val_split=None (got val_split={val_split!r}); set val_split: null or drop val_size"
            )
        self.path = path
        self.name = name
        self.train_split = train_split
        self.val_split = val_split
        self.test_split = test_split
        self.prompt_field = prompt_field
        self.answer_field = answer_field
        self.template = template
        self.val_size = val_size
        self.data_files = data_files
        self.extra_fields = list(extra_fields or [])
        self.seed = seed

    def has_split(self, split: Split) -> bool:
        return getattr(self, f"{split}_split") is not None or (split == "val" and self.val_size is not None)

    def load(self, split: Split) -> list[Record]:
        if not self.has_split(split):
            raise ValueError(f"HubSource: no dataset split for {split}; set the option `{split}_split`")
        name = getattr(self, f"{split}_split") or self.train_split
        rows = self._rows(name)
        index: list[int] = list(range(len(rows)))
        if self.val_size is not None and split != "test":  # val: a seeded sample of the training rows
            if self.val_size >= len(rows):
                raise ValueError(
                    f"HubSource: val_size={self.val_size} leaves none of the {len(rows)} training rows; lower val_size"
                )
            held = np.random.default_rng(self.seed).permutation(len(rows))[: self.val_size].tolist()
            index = held if split == "val" else sorted(set(index) - set(held))
        # ids number the dataset's rows (training ids stay stable whatever is held out)
        ids = [f"val-{i}" for i in range(len(index))] if split == "val" else [f"{split}-{r}" for r in index]
        return [
            make_record(
                rows[r],
                id=id,
                where=f"{self.path} [{name}], row {r + 1}",
                prompt_field=self.prompt_field,
                answer_field=self.answer_field,
                template=self.template,
                extra_fields=self.extra_fields,
            )
            for r, id in zip(index, ids, strict=True)
        ]

    def _rows(self, split: str) -> list[dict[str, Any]]:
        import datasets

        try:
            if (Path(self.path) / "dataset_dict.json").is_file():
                return datasets.load_from_disk(self.path)[split].to_list()
            return datasets.load_dataset(
                self.path, self.name, split=split, data_files=self.data_files
            ).to_list()
        except Exception as e:
            raise RuntimeError(
                f"HubSource: could not load split {split!r} of dataset {self.path!r} (name={self.name!r}): "
                f"{type(e).__name__}: {e}. The dataset must be available locally (a directory, data files "
                "or the Hugging Face cache) or downloadable from the Hub."
            ) from e
