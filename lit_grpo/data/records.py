"""Prompt records: the plain dicts a :class:`~lit_grpo.data.sources.PromptSource` returns.

A record is ``{"prompt": str, "reference": str, "id": str, "columns": {name: value}}``.

A field of a row is named by its key or, inside nested objects, by a dotted path
(``reward_model.ground_truth``, the layout of verl's data files); :func:`field_value` reads either.

Rows are checked as they are read; a bad row raises :class:`BadRowError`, whose message names the file
(or dataset), the line (or row) and the field, or, where the caller passes ``on_bad_row``, is handed to
that callback and skipped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from lit_grpo.types import PromptBatch

Record = dict[str, Any]
#: Called with each bad row's error when bad rows are skipped instead of raised.
OnBadRow = Callable[["BadRowError"], None]


class BadRowError(ValueError):
    """A row of the data that cannot become a prompt; the message names where it is and which field."""


class BadRowTypeError(BadRowError, TypeError):
    """A row field of the wrong type (a :class:`BadRowError` that is also a ``TypeError``)."""


def bad_field(where: str, field: str, option: str, problem: str) -> BadRowError:
    """The error for ``field`` (set by ``option``) of the row at ``where``, e.g. "is an empty prompt"."""
    return BadRowError(f"{where}: field {field!r} ({option}) {problem}")


def collate_prompts(records: Sequence[Record]) -> PromptBatch:
    """Records ``[P]`` -> one :class:`PromptBatch`; columns are taken from the first record."""
    names = records[0]["columns"].keys() if records else []
    return PromptBatch(
        prompts=[r["prompt"] for r in records],
        references=[r["reference"] for r in records],
        ids=[r["id"] for r in records],
        columns={k: [r["columns"][k] for r in records] for k in names},
    )


#: the roles a chat message may have
ROLES = ("system", "user", "assistant", "tool")


def field_value(row: dict[str, Any], name: str) -> Any:
    """The value of field ``name`` of ``row``: the key itself, else a dotted path into nested objects
    (``reward_model.ground_truth``); None where either is missing."""
    if name in row:
        return row[name]
    value: Any = row
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def chat_messages(value: Any, where: str, field: str, option: str) -> list[dict[str, str]]:
    """``value`` as a prompt of chat messages: a non-empty list of ``{"role", "content"}`` objects (roles of
    :data:`ROLES`, text content), that ends with a user turn; else a :class:`BadRowError` naming the turn."""
    if not isinstance(value, list) or not value:
        raise BadRowTypeError(f"{where}: field {field!r} ({option}) must be a prompt text or a non-empty "
                              f"list of chat messages, got {type(value).__name__} {value!r:.60}")
    messages = []
    for i, turn in enumerate(value):
        at = f"{where}: field {field!r} ({option}), message {i + 1}"
        content = turn.get("content") if isinstance(turn, dict) else None
        if not (isinstance(content, str) and turn.get("role") in ROLES):
            raise BadRowTypeError(f"{at} must be an object with a role ({', '.join(ROLES)}) and a text "
                                  f"content, got {turn!r:.80}")
        messages.append({"role": turn["role"], "content": turn["content"]})
    if messages[-1]["role"] != "user":
        raise BadRowError(f"{where}: field {field!r} ({option}) ends with a {messages[-1]['role']!r} turn; a "
                          "prompt ends with the user's turn (put the expected answer in the answer_field)")
    if not any(m["content"].strip() for m in messages if m["role"] == "user"):
        raise BadRowError(f"{where}: field {field!r} ({option}) has no user turn with text: an empty prompt")
    return messages


def require_fields(row: Any, where: str, fields: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Checks that ``row`` is a mapping holding every ``(option, field)`` of ``fields`` (not null; a field may
    be a dotted path into nested objects)."""
    if not isinstance(row, dict):
        raise BadRowError(f"{where}: expected an object with fields, got {type(row).__name__}")
    for option, name in fields:
        if field_value(row, name) is None:
            raise BadRowError(
                f"{where}: field {name!r} ({option}) is missing or null; the row has fields {list(row)}. "
                f"Set {option} to one of them or fix the data."
            )
    return row


def format_template(template: str, row: dict[str, Any], where: str) -> str:
    """``template.format(**row)`` with errors that name the row and the missing field."""
    try:
        return template.format(**row)
    except KeyError as e:
        raise BadRowError(
            f"{where}: template {template!r} references field {e.args[0]!r}, which the row lacks; "
            f"the row has fields {list(row)}. Fix the template."
        ) from None
    except (IndexError, ValueError) as e:
        raise BadRowError(
            f"{where}: template {template!r} is invalid ({e}); use named fields like '{{question}}'"
        ) from None


def check_text(value: Any, where: str, field: str, option: str, what: str) -> str:
    """``value`` as a non-blank string, else a :class:`BadRowError` naming ``field`` and ``option``."""
    if not isinstance(value, str):
        raise BadRowTypeError(
            f"{where}: field {field!r} ({option}) must be a string, got {type(value).__name__}"
        )
    if not value.strip():
        raise BadRowError(f"{where}: field {field!r} ({option}) is an empty {what}")
    return value


def answer_text(value: Any, where: str, field: str, option: str) -> str:
    """The reference text of a row's answer ``value``: text as it is, a number as its canonical text.

    JSON has one number type, so ``146`` may arrive as ``146.0``: a float that is a whole number becomes
    the integer's digits (``"146"``), any other finite float its shortest exact text (``repr``: ``0.1``
    -> ``"0.1"``, ``2.5e-07`` -> ``"2.5e-07"``), an integer its digits. A non-finite number or a boolean is a
    :class:`BadRowError` naming the row and the fix; any other value becomes ``str(value)``.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise BadRowTypeError(
            f"{where}: field {field!r} ({option}) is the boolean {json.dumps(value)}, not an answer text; "
            f"write it as a string (e.g. \"{json.dumps(value)}\" or \"yes\") in the data"
        )
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise bad_field(where, field, option, f"is the number {value}, which no completion can match; "
                                                  "fix the data")
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def build_records(
    rows: Iterable[tuple[str, str, Any]],
    build: Callable[[Any, str, str], Record],
    on_bad_row: OnBadRow | None = None,
) -> Iterator[Record]:
    """``build(row, where, id)`` for each ``(where, id, row)``; a row that is a :class:`BadRowError`
    (a malformed line) or fails to build raises, or goes to ``on_bad_row`` and is skipped."""
    for where, id, row in rows:
        try:
            if isinstance(row, BadRowError):
                raise row
            yield build(row, where, id)
        except BadRowError as err:
            if on_bad_row is None:
                raise
            on_bad_row(err)


def read_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` for each non-blank line, ``where`` naming the file and the 1-based line.

    Lines are UTF-8 (a byte-order mark at the start of the file is ignored). A line that is not valid
    UTF-8 or not valid JSON comes as ``(where, BadRowError)`` so that a caller may skip it; the other
    lines still read.
    """
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            where = f"{path}, line {line_no}"
            try:
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as e:
                yield where, BadRowError(
                    f"{where}: not UTF-8 text ({e.reason} at byte {e.start + 1} of the line); re-encode the "
                    "file as UTF-8 (e.g. iconv -f latin1 -t utf-8) or fix the line"
                )
                continue
            if not line.strip():
                continue
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as e:
                yield where, BadRowError(f"{where}: malformed JSON ({e.msg} at column {e.colno})")


def read_parquet(path: Path, batch_size: int = 1024) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` for each row, ``where`` naming the file and the 1-based row; read in batches."""
    import pyarrow.parquet as pq

    row_no = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
        for row in batch.to_pylist():
            row_no += 1
            yield f"{path}, row {row_no}", row


def read_csv(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` for each row of a CSV file with a header line, ``where`` naming the file and the
    1-based line (the header is line 1); every value is text. A row with more or fewer values than the header
    comes as ``(where, BadRowError)``."""
    import csv

    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        for row in reader:
            where = f"{path}, line {reader.line_num}"
            if None in row or None in row.values():
                extra = row.pop(None, [])
                values = sum(v is not None for v in row.values()) + len(extra)
                yield where, BadRowError(f"{where}: {values} value(s) where the header has "
                                         f"{len(reader.fieldnames or [])} columns; fix the line (quote a "
                                         "value that holds a comma)")
                continue
            yield where, row


def read_saved_dataset(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` for each row of a directory written by ``datasets.Dataset.save_to_disk``, read from
    its memory-mapped Arrow files."""
    import datasets

    for i, row in enumerate(datasets.load_from_disk(str(path))):
        yield f"{path}, row {i + 1}", row
