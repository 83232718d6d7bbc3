"""One JSONL line: how a record is encoded, how a line is parsed, how a file's lines are read.

Readers never stop on a bad line: a line that is not UTF-8, not JSON, or not an object
parses to None and the caller counts it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO


def encode_line(record: Mapping[str, Any]) -> bytes:
    """One JSONL line (UTF-8, newline-terminated). Raises ValueError (NaN: not JSON, and strict
    readers such as pyarrow reject it), TypeError or UnicodeEncodeError for what is not JSON."""
    return (json.dumps(dict(record), ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def checked_line(line: bytes) -> bytes:
    """`line` itself when it looks like what `encode_line` makes; ValueError otherwise."""
    if not (line.startswith(b"{") and line.endswith(b"}\n")) or line.count(b"\n") != 1:
        raise ValueError("a pre-encoded record must be one newline-terminated JSON object line")
    return line


def parse_object(line: bytes) -> dict[str, Any] | None:
    """The JSON object on this line, or None when it is anything else."""
    try:
        value = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def read_lines(path: Path, end: int | None = None) -> Iterator[tuple[bytes, dict[str, Any] | None]]:
    """(line without its terminator, parsed object or None when invalid) for each non-blank
    line (of the lines that start before byte `end`, when given); a missing file has no lines."""
    for line in raw_lines(path, end):
        yield line, parse_object(line)


def raw_lines(path: Path, end: int | None = None) -> Iterator[bytes]:
    """Each non-blank line without its terminator (of those that start before byte `end`)."""
    if end is not None and end <= 0:  # none: not even a first block is read (a shard this
        return  # process wrote whole, its records trusted: read at every scan of the run's end)
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        offset = 0
        for raw in _split_lines(handle):
            if end is not None and offset >= end:
                return
            offset += len(raw)
            line = raw.rstrip(b"\r\n")
            if line.strip():
                yield line


BLOCK = 1 << 20


def _split_lines(handle: BinaryIO) -> Iterator[bytes]:
    """The file's lines, each with its newline (the last one may have none), read a block at a
    time: iterating the file object copies each line through its buffer, ~3× slower for the
    ~9 KB lines of a run's shards (a million-prompt resume reads ~9 GB)."""
    rest = b""
    while block := handle.read(BLOCK):
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line + b"\n"
    if rest:
        yield rest


def json_int(value: Any) -> int:
    """An int field of a document read from JSON; anything else (absent, null, bool) counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
