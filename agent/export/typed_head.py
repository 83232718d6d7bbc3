"""A JSON Lines export whose first rows give every column its type.

`datasets.load_dataset("json", ...)` infers a file's schema from its first block (10 MB) and
casts every later block to it; a column that is null, or an empty list, in every row of that
block gets the type `null`, and the cast of the first later block with a value fails (1,300
unverified rows, then a verified one). JSON has no typed null, so only rows can carry the types:
each leaf of the format's declared schema (`agent.export.columns`: a reward, a tool call's
arguments, a tool's `nonzero_exit`, …) whose first value comes past the file's first MiB has
that row moved to the start of the file, and the rows keep the run's order otherwise. A leaf no
row fills is null in every row, which loads. The file is rewritten only when a row moves.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

__all__ = ["HEAD", "TypedHead", "leaves"]

HEAD = 1 << 20  # a tenth of the block `datasets` infers from (its JsonConfig.chunksize, 10 MB)
ITEM = "[]"  # a path step into a list's items
Leaf = tuple[str, ...]


def leaves(schema: pa.Schema) -> set[Leaf]:
    """The paths of the schema's scalar values, through structs and lists."""

    def walk(kind: pa.DataType, path: Leaf) -> Iterator[Leaf]:
        if pa.types.is_struct(kind):
            for field in kind:
                yield from walk(field.type, (*path, field.name))
        elif pa.types.is_list(kind):
            yield from walk(kind.value_type, (*path, ITEM))
        else:
            yield path

    return {leaf for field in schema for leaf in walk(field.type, (field.name,))}


def _filled(value: Any, path: Leaf) -> bool:
    """Whether `value` holds a non-null value at `path` (in any item of a list)."""
    if not path:
        return value is not None
    step, rest = path[0], path[1:]
    if step == ITEM:
        return isinstance(value, list) and any(_filled(item, rest) for item in value)
    return isinstance(value, Mapping) and _filled(value.get(step), rest)


class TypedHead:
    """The rows written to one JSON Lines file, and which of them must lead it."""

    def __init__(self, schema: pa.Schema) -> None:
        self.unfilled = leaves(schema)
        self.late: list[tuple[int, int]] = []  # (offset, length) of each row to move first
        self.size = 0

    def wrote(self, row: Mapping[str, Any], length: int) -> None:
        """`row` was written as the next `length` bytes."""
        filled = {leaf for leaf in self.unfilled if _filled(row, leaf)}
        if filled:
            self.unfilled -= filled
            if self.size >= HEAD:
                self.late.append((self.size, length))
        self.size += length

    def finish(self, handle: BinaryIO) -> None:
        """Rewrite the file open as `handle` (every row written) with the late rows first."""
        if not self.late:
            return
        handle.flush()
        path = Path(handle.name)
        with tempfile.TemporaryFile(dir=path.parent) as spool:
            with path.open("rb") as written:
                shutil.copyfileobj(written, spool)
            handle.seek(0)
            handle.truncate()
            for offset, length in self.late:
                _copy(spool, handle, offset, offset + length)
            start = 0
            for offset, length in self.late:
                _copy(spool, handle, start, offset)
                start = offset + length
            _copy(spool, handle, start, self.size)


def _copy(source: BinaryIO, target: BinaryIO, start: int, end: int, chunk: int = 1 << 20) -> None:
    source.seek(start)
    while start < end:
        data = source.read(min(chunk, end - start))
        if not data:
            raise OSError(f"{target.name}: its rows changed while the export rewrote it")
        target.write(data)
        start += len(data)
