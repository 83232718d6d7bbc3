"""One batch file's part of the merge: its lines in `prompt_index` order (`in_index_order`),
and the fast path for a file this process wrote whole (a fresh run's shards, `copy_shard`):
every line is recorded (`agent.store.shard_index`) and counted already, so nothing is parsed.
The file is read once, its lines put in `prompt_index` order from the records, each line's CRC
checked against its record, and the kept lines written with one call per file.

At 200,000 entries the line-by-line copy (a `pread`, a generator step, a key lookup through a
record tuple and a `write` per line) was most of the time from the last reply to exit (issue 26).
The result is the slow path's, byte for byte and count for count
(`tests/test_merge_shard.py`): a file with a line that calls a tool the registry does not know
(it must be labelled), or larger than WHOLE_READ_BYTES (a shard is never held in memory past
that), goes the slow way.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from agent.protocols.store import KeyBook
from agent.store.jsonl import parse_object
from agent.store.line_head import index_prefix
from agent.store.shard_index import ROW, Line, Shard, ShardChanged

WHOLE_READ_BYTES = 64 << 20  # a batch file up to this size is read at once


def copyable(shard: Shard | None, counted: bool, tokens: bool) -> bool:
    """Whether the fast path applies: every line of the file is this process's (nothing
    before `start`, nothing loaded from saved records), counted by the caller, no token
    sidecar to write beside each line, and the file small enough to read at once."""
    return (
        shard is not None
        and counted
        and not tokens
        and shard.start == 0
        and shard.base == 0
        and shard.end <= WHOLE_READ_BYTES
    )


class Copied(NamedTuple):
    """What `copy_shard` counted, as the slow path counts into `MergeReport`."""

    written: int
    tombstones: int
    withdrawn: int  # result lines of keys in `exclude`
    duplicates: int  # a key's lines after its first
    counted_left_out: int  # withdrawn and duplicates: lines the caller counted, not merged


def copy_shard(
    path: Path,
    shard: Shard,
    valid_tools: Collection[str],
    exclude: Collection[str],
    kept: KeyBook,
    out: BinaryIO,
    unkept: Collection[str] = (),
    first: int = 0,
) -> Copied | None:
    """Copy `path`'s lines from its `first` record on to `out`, in index order, but tombstones and
    keys in `exclude`, `kept` (merged so far: it gains this file's) or `unkept` (first line moved
    out); None, with nothing written or kept, when a line calls a tool not in `valid_tools`."""
    every = list(ROW.iter_unpack(shard.rows))
    rows, keys = every[first:], packed_keys(shard.keys, (row[4] for row in every))[first:]
    if not _tools_known({row[7] for row in rows}, shard.names, valid_tools):
        return None
    with path.open("rb") as handle:
        data = memoryview(handle.read(shard.end))
    if len(data) != shard.end:
        raise ShardChanged(f"{path.name}: shorter than this process left it")
    parts: list[memoryview] = []
    tombstones = withdrawn = duplicates = 0
    for i in sorted(range(len(rows)), key=lambda i: rows[i][2]):  # stable: append order among equals
        offset, length, number, crc, _size, tombstone, _labels, _tools = rows[i]
        line = data[offset : offset + length]
        if zlib.crc32(line) != crc:
            raise ShardChanged(f"{path.name}: a recorded line changed before the merge")
        key = keys[i]
        if tombstone:
            tombstones += 1
        elif key in exclude:
            withdrawn += 1
        elif key in unkept or not kept.note(key, number):  # noted unless there already
            duplicates += 1
        else:
            parts.append(line)
    if parts:
        out.write(b"\n".join(parts) + b"\n")
    return Copied(len(parts), tombstones, withdrawn, duplicates, withdrawn + duplicates)


def packed_keys(packed: bytearray, sizes: Iterable[int]) -> list[str]:
    """The keys packed back to back in `packed`, one per size."""
    keys, at = [], 0
    for size in sizes:
        keys.append(packed[at : at + size].decode("utf-8"))
        at += size
    return keys


def _tools_known(ids: set[int], names: list[tuple[str, ...]], valid_tools: Collection[str]) -> bool:
    return all(name in valid_tools for i in ids for name in names[i])


def plain_rows(shard: Shard, first: int, valid_tools: Collection[str]) -> bool:
    """No tombstone and no tool outside `valid_tools` in `shard`'s rows from `first` on: lines
    merged as they are, each counted once."""
    rows = list(ROW.iter_unpack(memoryview(shard.rows)[first * ROW.size :]))
    return not any(row[5] for row in rows) and _tools_known(
        {row[7] for row in rows}, shard.names, valid_tools
    )


def in_index_order(
    path: Path, shard: Shard | None
) -> Iterator[tuple[bytes, dict[str, Any] | None, Line | None]]:
    """The non-blank lines of a batch file (as `read_lines`), sorted by each line's
    `prompt_index` (stable; a line without one sorts first): (line, entry, None) for a line
    read, (line, None, its record) for a line this process appended (`shard`'s from its
    `start`). Every recorded line's CRC is checked; one loaded from the saved records (before
    `start`) is parsed, as a line read. The lines read are read twice: the first pass keeps
    only (index, offset, length, None) per line, so a shard is never held in memory."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        order: list[tuple[int, int, int, Line | None]] = []
        offset, end = 0, None if shard is None else shard.base
        for raw in handle:
            if end is not None and offset >= end:
                break
            if raw.strip():
                order.append((index_of(raw), offset, len(raw), None))
            offset += len(raw)
        order += [(line.number, line.offset, line.length, line) for line in shard.lines] if shard else []
        order.sort(key=lambda item: item[0])  # stable: file order among equal indices
        for _index, start, length, recorded in order:
            line = os.pread(handle.fileno(), length, start).rstrip(b"\r\n")
            if recorded is None:
                yield line, parse_object(line), None
            elif zlib.crc32(line) != recorded.crc:
                raise ShardChanged(f"{path.name}: a recorded line changed before the merge")
            elif shard is not None and recorded.offset < shard.start:
                yield line, parse_object(line), None
            else:
                yield line, None, recorded


def index_of(raw: bytes) -> int:
    """A line's `prompt_index` for the sort: read from its first bytes when it has the runner's
    layout (`index_prefix`: the line is parsed once, when copied, not twice), else parsed."""
    prefixed = index_prefix(raw)
    if prefixed is not None:
        return prefixed
    entry = parse_object(raw.rstrip(b"\r\n"))
    number = entry.get("prompt_index") if entry is not None else None
    return number if isinstance(number, int) and not isinstance(number, bool) else -1
