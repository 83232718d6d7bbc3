"""A JSONL dataset file, streamed line by line: each line judged by the row rules
(`agent.batch.row_fields`), a blank one skipped, an overlong one read past without holding it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from agent.batch.dataset_source import CHANGED, LineError, Record
from agent.batch.row_columns import ColumnMap
from agent.batch.row_fields import FieldError, parse_line
from agent.errors import DatasetError

# The largest context windows hold ~2M tokens (~8 MB of text): a longer line is no prompt.
MAX_LINE_BYTES = 64 * 2**20
_SKIP_CHUNK = 2**20
_BOM = b"\xef\xbb\xbf"


class JsonlSource:
    unit = ""
    noun = "lines"

    def __init__(self, path: Path, columns: ColumnMap) -> None:
        self.path, self.name, self.columns = path, str(path), columns

    def check(self) -> None:
        _open(self.path).close()

    def records(self, backend: str | None) -> Iterator[tuple[int, Record]]:
        for line_no, raw in _lines(self.path):
            yield line_no, self._classify(line_no, raw, backend)

    def wanted_records(
        self, backend: str | None, bad: set[int], rows: int, wanted: Callable[[int], bool]
    ) -> Iterator[tuple[int, int, Record]]:
        """(row index, line number, record) of the rows `wanted` among the first `rows`, the
        others passed by their bytes: given every bad line's number (`bad`), a line is a row
        unless it is one of them or blank (a row is a JSON object: it starts with `{`). A file
        that ends before its `rows` (cut short since they were counted) raises DatasetError."""
        index = line_no = 0
        for line_no, raw in _lines(self.path):
            if index >= rows:
                return
            if raw is None or line_no in bad or not raw.lstrip().startswith(b"{"):
                continue
            if wanted(index):
                yield index, line_no, self._classify(line_no, raw, backend)
            index += 1
        if index < rows:
            raise DatasetError(
                f"{self.name}:{line_no + 1}: {CHANGED} (it ends after {index} of its {rows} rows); "
                "run again with --resume"
            )

    def _classify(self, line_no: int, raw: bytes | None, backend: str | None) -> Record:
        """One line as its fields, its error, or None when it is blank."""
        if raw is None:
            too_long = f"line longer than {MAX_LINE_BYTES} bytes (MAX_LINE_BYTES)"
            return LineError(self.name, line_no, None, too_long)
        try:
            return parse_line(raw, backend, self.columns)
        except FieldError as exc:
            return LineError(self.name, line_no, exc.field_name, exc.reason)


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"{path}: dataset file not found") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory, not a dataset file") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the dataset file ({exc.strerror})") from None


def _lines(path: Path) -> Iterator[tuple[int, bytes | None]]:
    """(1-based line number, bytes without the line end, or None for an overlong line) of
    every line, streamed; raises DatasetError on a read error."""
    with _open(path) as handle:
        line_no = 0
        try:
            for raw in _bounded_lines(handle):
                line_no += 1
                if line_no == 1 and raw is not None and raw.startswith(_BOM):
                    raw = raw[len(_BOM) :]
                line = None if raw is None else raw.rstrip(b"\r\n")
                yield line_no, line if line is None or len(line) <= MAX_LINE_BYTES else None
        except OSError as exc:
            raise DatasetError(f"{path}:{line_no + 1}: read failed ({exc.strerror})") from None


def _bounded_lines(handle: BinaryIO) -> Iterator[bytes | None]:
    """Every line, at most MAX_LINE_BYTES and its line end long; None for a longer one, read
    past without holding it (a file of one endless line would otherwise be loaded whole)."""
    limit = MAX_LINE_BYTES + 2  # room for "\r\n"
    while raw := handle.readline(limit):
        if len(raw) < limit or raw.endswith(b"\n"):
            yield raw
            continue
        while (rest := handle.readline(_SKIP_CHUNK)) and not rest.endswith(b"\n"):
            pass
        yield None
