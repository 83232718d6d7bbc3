"""Durability on a POSIX file system: whole-file replacement, directory fsync, torn-line repair.

Every writer of a durable file goes through here: the run directory (`agent.store.directory`)
and the single-query CLI's trajectory files (`agent.export.samples_file`).

The torn-line rule, for the last line of a JSONL file that a writer may have been killed in
the middle of: a last line that parses to a JSON object lost at most its newline (killed
between the object and the newline, or written by another tool), so it is kept and the
newline added. Any other last line, newline-terminated or not, is torn: its bytes are
appended to `<file>.torn` (fsynced) and only then cut from the file, so they are never in
neither place. A blank newline-terminated last line is left alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from agent.store.jsonl import parse_object

TEMP_SUFFIX = ".tmp"
_CHUNK = 1 << 16  # bytes read per step when scanning back for the last line


def fsync_directory(directory: Path) -> None:
    """Make renames and new names in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_write(path: Path) -> Iterator[BinaryIO]:
    """Write `path` all or nothing: a temp file in the same directory, fsynced, then renamed
    over it. If the block raises, the old file stays as it was and the temp file is removed."""
    temp = path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")
    with replacing(temp.open("wb"), temp, path) as handle:
        yield handle


@contextmanager
def replacing(handle: BinaryIO, temp: Path, path: Path) -> Iterator[BinaryIO]:
    """`handle`, open for writing on `temp` (beside `path`, perhaps written already), to
    finish: on leaving, fsynced and renamed over `path`; if the block raises, closed and
    removed, the old `path` as it was (`atomic_write`'s second half)."""
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def repair_last_line(handle: BinaryIO, path: Path) -> str | None:
    """Apply the torn-line rule (module docstring) to `path`, open as `handle` for reading
    and writing; returns a one-line note of the change, None when there was none."""
    size = handle.seek(0, os.SEEK_END)
    if size == 0:
        return None
    handle.seek(size - 1)
    terminated = handle.read(1) == b"\n"
    end = size - 1 if terminated else size
    start = _line_start(handle, end)
    handle.seek(start)
    line = handle.read(end - start)
    whole = parse_object(line) is not None
    if terminated and (whole or not line.strip()):
        return None
    if whole:
        handle.seek(0, os.SEEK_END)
        handle.write(b"\n")
        _sync(handle)
        return f"{path.name}: added the missing newline after a complete last line"
    _keep_torn(path.with_name(path.name + ".torn"), line + (b"\n" if terminated else b""))
    handle.truncate(start)
    _sync(handle)
    return f"{path.name}: moved a torn last line ({size - start} bytes) to {path.name}.torn"


def _sync(handle: BinaryIO) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _line_start(handle: BinaryIO, end: int) -> int:
    """Offset of the first byte of the line that ends at `end` (exclusive)."""
    pos = end
    while pos > 0:
        step = min(_CHUNK, pos)
        pos -= step
        handle.seek(pos)
        newline = handle.read(step).rfind(b"\n")
        if newline >= 0:
            return pos + newline + 1
    return 0


def _keep_torn(path: Path, data: bytes) -> None:
    """Append the torn bytes (newline-terminated) to the side file, durably, before the
    original is truncated: the bytes are never in neither place."""
    created = not path.exists()
    with path.open("ab") as handle:
        handle.write(data if data.endswith(b"\n") else data + b"\n")
        _sync(handle)
    if created:
        fsync_directory(path.parent)
