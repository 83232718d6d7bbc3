"""What every dataset source offers the two passes over it (`agent.batch.dataset`): its
records in order, each numbered (a JSONL line's number, a Parquet or `datasets` row's 1-based
position) and already judged by the row rules (`agent.batch.row_fields`), and how a message
names a place in it (`FILE:LINE` for a JSONL file, `FILE:row N` for rows)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.batch.row_columns import ColumnMap
from agent.batch.row_fields import FieldError, LineFields, parse_record
from agent.errors import DatasetError

CHANGED = "the dataset changed since the run scanned it"  # each feed that finds it says so


@dataclass(frozen=True)
class LineError:
    path: str
    line_no: int  # the line's number, or the row's (1-based)
    field: str | None
    reason: str
    unit: str = ""  # "" for a JSONL line (FILE:12), "row " for a row (FILE:row 12)

    def __str__(self) -> str:
        where = f"{self.path}:{self.unit}{self.line_no}"
        return f"{where}: {self.field}: {self.reason}" if self.field else f"{where}: {self.reason}"


Record = LineFields | LineError | None  # a row, a bad one, or a blank line


class Source(Protocol):
    name: str  # the dataset as messages name it
    unit: str  # LineError.unit
    noun: str  # what is counted: "lines" or "rows"

    def check(self) -> None:
        """DatasetError unless the dataset can be read (cheap: before anything else is checked)."""
        ...

    def records(self, backend: str | None) -> Iterator[tuple[int, Record]]:
        """(number, the record judged) of every line or row, streamed."""
        ...


def where(source: Source, number: int) -> str:
    return f"{source.name}:{source.unit}{number}"


def judge_record(
    source: Source, number: int, record: Mapping[str, Any], backend: str | None, columns: ColumnMap
) -> LineFields | LineError:
    """One row of a Parquet file or a `datasets` dataset by the row rules."""
    try:
        return parse_record(record, backend, columns)
    except FieldError as exc:
        return LineError(source.name, number, exc.field_name, exc.reason, source.unit)


def check_columns(name: str, existing: Sequence[str], columns: ColumnMap) -> None:
    """DatasetError (exit 2) when a column the flags name is not in the dataset's schema."""
    for column in columns.required():
        if column not in existing:
            flag = "--prompt_field" if column == columns.prompt else "--field_map"
            raise DatasetError(
                f"{name}: no column {column!r} ({flag}); its columns: {', '.join(existing) or 'none'}"
            )
