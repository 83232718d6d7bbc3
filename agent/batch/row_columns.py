"""Which record columns a run reads as its row fields (--prompt_field, --field_map), and what a
record's values must be to be read as JSON.

A row field is read from the column of its own name (`prompt`, `image`, `verify`...) unless
--prompt_field or --field_map names another column for it; `answer` (mapped only) fills the
`verify` object's `answer`. Other columns are never read. `view` turns a record (a JSON line's
object, a Parquet or `datasets` row) into the row fields' values, keyed by field name, so one
set of rules (`agent.batch.row_fields`) judges every source.

A Parquet or `datasets` row is no JSON text: `jsonable` holds its values to what a JSON line
could say (finite numbers, string keys, Unicode text), so a row that could not be written back
into the run's JSONL output is a bad row, not a failed write mid-run. Dates and times become
ISO 8601 strings, as a JSON export of the dataset would write them.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.config.dataset_config import MAPPABLE_FIELDS, DatasetOptions

ROW_FIELDS = ("prompt", "image", "docker_image", "cwd", "metadata", "sampling", "verify")
Error = Callable[[str | None, str], Exception]


@dataclass(frozen=True)
class ColumnMap:
    prompt: str = "prompt"  # the column holding the prompt
    mapped: tuple[tuple[str, str], ...] = ()  # (row field or "answer", column), from --field_map

    @classmethod
    def of(cls, options: DatasetOptions) -> ColumnMap:
        return cls(options.prompt_field, options.field_map)

    def column(self, field: str) -> str | None:
        """The column `field` is read from (None: `answer`, when not mapped)."""
        if field == "prompt":
            return self.prompt
        named = dict(self.mapped)
        return named.get(field, None if field == "answer" else field)

    def required(self) -> tuple[str, ...]:
        """The columns the flags name: each must exist in a dataset that has a schema."""
        return (self.prompt, *(column for _field, column in self.mapped))

    def read(self) -> tuple[str, ...]:
        """Every column a row field may be read from, in field order, without repeats."""
        columns = (self.column(field) for field in (*ROW_FIELDS, "answer"))
        return tuple(dict.fromkeys(column for column in columns if column is not None))

    def view(self, record: Mapping[str, Any], error: Error) -> dict[str, Any]:
        """The row fields' values of `record`, keyed by field name; only the fields whose
        column the record has (a missing `prompt` stays missing)."""
        view: dict[str, Any] = {}
        for field in ROW_FIELDS:
            column = self.column(field)
            if column is not None and column in record:
                view[field] = record[column]
        answer_column = self.column("answer")
        answer = record.get(answer_column) if answer_column is not None else None
        if answer is not None:
            view["verify"] = _with_answer(view.get("verify"), answer, answer_column or "", error)
        return view

    def note(self, field_name: str | None, record: Mapping[str, Any]) -> str:
        """' (column NAME)' when the field at fault was read from a column of another name."""
        if field_name is None:
            return ""
        answer_column = self.column("answer")
        from_answer = answer_column is not None and record.get(answer_column) is not None
        if field_name.startswith("verify.answer") and from_answer:
            return f" (column {answer_column!r})"
        head = field_name.split(".")[0]
        column = self.column(head) if head in ROW_FIELDS else None
        return "" if column is None or column == head else f" (column {column!r})"


def _with_answer(verify: Any, answer: Any, column: str, error: Error) -> Any:
    """The `verify` object with the `answer` column's value as its answer."""
    if verify is None:
        return {"answer": answer}
    if not isinstance(verify, Mapping):
        return verify  # the verify rules name what is wrong with it
    if verify.get("answer") is not None:
        raise error("verify.answer", f"given twice: by the verify object and by the column {column!r}")
    return {**verify, "answer": answer}


def check_field_map(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """--field_map's `field=column` items as pairs; ValueError saying what is wrong."""
    result: dict[str, str] = {}
    for pair in pairs:
        field, sep, column = (part.strip() for part in pair.partition("="))
        if not sep or not field or not column:
            raise ValueError(f"{pair!r} is not field=column")
        if field not in MAPPABLE_FIELDS:
            hint = " (the prompt's column is --prompt_field)" if field == "prompt" else ""
            raise ValueError(f"unknown field {field!r}{hint}; fields: {', '.join(MAPPABLE_FIELDS)}")
        if field in result:
            raise ValueError(f"field {field!r} mapped twice")
        result[field] = column
    return tuple(result.items())


def jsonable(name: str, value: Any, error: Error, depth: int = 0) -> Any:
    """`value` as JSON would hold it, or `error(name, reason)` when JSON cannot."""
    if depth > 200:
        raise error(name, "nested too deeply")
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise error(name, f"holds {value}, which is not valid JSON")
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise error(name, "holds an unpaired surrogate, which is not Unicode text") from None
        return value
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [jsonable(name, item, error, depth + 1) for item in value]
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise error(name, "has a key that is not a string")
        return {key: jsonable(name, item, error, depth + 1) for key, item in value.items()}
    raise error(name, f"holds a {type(value).__name__} value, which JSON cannot hold")
