"""A Parquet dataset file, streamed: record batches of the columns the run reads (never the
file whole, never a column it does not read), each row judged by the row rules. Nested columns
come as JSON values: a struct column (`metadata`, `verify`) is an object, a list column an array.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from agent.batch.dataset_source import Record, check_columns, judge_record
from agent.batch.row_columns import ColumnMap
from agent.errors import DatasetError

if TYPE_CHECKING:  # pyarrow is imported by the Parquet reader only: every run imports this module
    import pyarrow.parquet as pq

_MAGIC = b"PAR1"
# Rows converted to Python at a time: prompts can be megabytes, so a few hundred at most.
BATCH_ROWS = 256


def is_parquet(path: Path) -> bool:
    """Whether `path` is a Parquet file (its magic bytes, whatever its name); False when it
    cannot be opened (the JSONL reader says why)."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(_MAGIC)) == _MAGIC
    except OSError:
        return False


class ParquetSource:
    unit = "row "
    noun = "rows"

    def __init__(self, path: Path, columns: ColumnMap) -> None:
        self.path, self.name, self.columns = path, str(path), columns

    def _open(self) -> pq.ParquetFile:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(self.path)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"{self.path}: cannot read the Parquet file ({exc})") from None

    def check(self) -> None:
        check_columns(self.name, self._open().schema_arrow.names, self.columns)

    def records(self, backend: str | None) -> Iterator[tuple[int, Record]]:
        import pyarrow as pa

        parquet = self._open()
        names = parquet.schema_arrow.names
        check_columns(self.name, names, self.columns)
        wanted = [column for column in self.columns.read() if column in names]
        number = 0
        batches = parquet.iter_batches(batch_size=BATCH_ROWS, columns=wanted)
        while True:
            try:
                batch = next(batches, None)
            except (OSError, pa.ArrowException) as exc:
                raise DatasetError(f"{self.name}:row {number + 1}: read failed ({exc})") from None
            if batch is None:
                return
            for record in batch.to_pylist():
                number += 1
                yield number, judge_record(self, number, record, backend, self.columns)
