"""Prompt records: the plain dicts a :class:`~lit_grpo.data.sources.PromptSource` returns.

A record is ``{"prompt": str, "reference": str, "id": str, "columns": {name: value}}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lit_grpo.types import PromptBatch

Record = dict[str, Any]


def collate_prompts(records: Sequence[Record]) -> PromptBatch:
    """Records ``[P]`` -> one :class:`PromptBatch`; columns are taken from the first record."""
    names = records[0]["columns"].keys() if records else []
    return PromptBatch(
        prompts=[r["prompt"] for r in records],
        references=[r["reference"] for r in records],
        ids=[r["id"] for r in records],
        columns={k: [r["columns"][k] for r in records] for k in names},
    )


def make_record(
    row: dict[str, Any],
    *,
    id: str,
    where: str,
    prompt_field: str,
    answer_field: str,
    template: str,
    extra_fields: Sequence[str] = (),
) -> Record:
    """Check one raw row and turn it into a record; ``where`` ("file, line 3") prefixes every error."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected an object with fields, got {type(row).__name__}")
    fields = list(row)
    for option, name in [("prompt_field", prompt_field), ("answer_field", answer_field)] + [
        ("extra_fields", f) for f in extra_fields
    ]:
        if row.get(name) is None:
            raise ValueError(
                f"{where}: field {name!r} ({option}) is missing or null; the row has fields {fields}. "
                f"Set {option} to one of them or fix the data."
            )
    prompt = row[prompt_field]
    if not isinstance(prompt, str):
        raise TypeError(
            f"{where}: field {prompt_field!r} (prompt_field) must be a string, got {type(prompt).__name__}"
        )
    if not prompt.strip():
        raise ValueError(f"{where}: field {prompt_field!r} (prompt_field) is an empty prompt")
    try:
        text = template.format(**row)
    except KeyError as e:
        raise ValueError(
            f"{where}: template {template!r} references field {e.args[0]!r}, which the row lacks; "
            f"the row has fields {fields}. Fix the template."
        ) from None
    except (IndexError, ValueError) as e:
        raise ValueError(
            f"{where}: template {template!r} is invalid ({e}); use named fields like '{{question}}'"
        ) from None
    return {
        "prompt": text,
        "reference": str(row[answer_field]),
        "id": id,
        "columns": {f: row[f] for f in extra_fields},
    }


def read_jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` for each non-blank line, ``where`` naming the file and the 1-based line."""
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}, line {line_no}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: malformed JSON ({e.msg} at column {e.colno})") from None


def read_parquet(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` for each row, ``where`` naming the file and the 1-based row."""
    import pyarrow.parquet as pq

    for row_no, row in enumerate(pq.read_table(path).to_pylist(), start=1):
        yield f"{path}, row {row_no}", row
