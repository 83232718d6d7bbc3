"""One JSONL line: how a record is encoded, how a line is parsed, how a file's lines are read.

Readers never stop on a bad line: a line that is not UTF-8, not JSON, or not an object
parses to None and the caller counts it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
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


LIST_CHUNK = 65_536  # ints encoded at a time


def document_pieces(
    data: Mapping[str, Any], long_list: tuple[str, Iterable[int]] | None = None
) -> Iterator[bytes]:
    """`data` as an indented JSON document (encoded now: a value JSON cannot hold raises here),
    in pieces; with `long_list` (a key and its ints), that key's list last, on one line,
    encoded a chunk at a time: checkpoint.json's completed prompts are a million at a million
    prompts, which `json.dumps(..., indent=2)` made ~100 MB of small strings of at each
    checkpoint (issue 26: the parent's peak)."""
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
    if long_list is None:
        return iter([(text + "\n").encode("utf-8")])
    key, values = long_list
    head = text[:-1].rstrip() + ("," if data else "")  # the document without its closing brace
    return _listed(f"{head}\n  {json.dumps(key, ensure_ascii=False)}: [", iter(values))


def _listed(head: str, numbers: Iterator[int]) -> Iterator[bytes]:
    yield head.encode("utf-8")
    separator = ""
    while chunk := list(islice(numbers, LIST_CHUNK)):
        yield (separator + ", ".join(map(str, map(int, chunk)))).encode("ascii")
        separator = ", "
    yield b"]\n}\n"
