"""What this process appended to each batch file, line by line, so the end of a run neither
scans nor parses those lines again (issue 26: the end of a run is O(1) in its size for the
user's wait).

`RunDirectory` parses each result line once, as it appends it, and keeps here what the scan
(`agent.store.index`) and the merge (`agent.store.merge`) read of a line: its offset and
length, `prompt_index`, key, whether it is a tombstone, its labels and tool names, and a CRC
of its bytes, packed in a shard's two bytearrays (`Shard`: nothing per line is a Python object,
so the parent's memory stays flat over a million prompts). The records are saved beside each
shard as the run checkpoints (`agent.store.records_file`), so a resume loads an earlier
invocation's lines instead of reading them (`Shard.base` 0); a shard's part written before
this process and not loaded is read from the file as before. Kept lines
are trusted only while the shard is as this process left it (`ShardRecords.unchanged`: size,
inode and mtime after our last append);
the merge checks each line's CRC as it copies it (`ShardChanged` on a difference). A line
without a `metadata.prompt_key` is never recorded: its key depends on every line before it
(`KeyResolver`), so the records are dropped and the files read as before.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from agent.store.keys import is_tombstone


class ShardChanged(Exception):
    """A recorded line's bytes are not what this process wrote (a shard edited since)."""


class Line(NamedTuple):
    offset: int
    length: int  # without the newline
    number: int  # prompt_index, -1 when the line has none (the merge sorts it first)
    key: str
    tombstone: bool
    labels: tuple[str, ...]  # metadata.discard_reasons
    tools: tuple[str, ...]  # the names in tool_stats
    crc: int


# One recorded line, packed: offset, length, number, crc, key length, tombstone, labels' and
# tools' ids in `ShardRecords`' tables of name tuples. The key's UTF-8 bytes follow in `keys`.
ROW = struct.Struct("<qIqIIBII")


@dataclass
class Shard:
    """A shard's recorded lines, packed (issue 26: ~60 bytes a line, no object per line: a
    million-prompt run's records are ~60 MB, not ~300 MB of tuples). Iterating makes each
    `Line` again, in append order."""

    start: int  # the file's size before this process's first append: lines from here are ours
    names: list[tuple[str, ...]]  # the records' table of name tuples (shared by every shard)
    base: int = -1  # where the rows begin: `start`, or 0 for a shard loaded from its saved records
    end: int = 0  # its size after our last append
    stamp: tuple[int, int] = (0, 0)  # (inode, mtime_ns) after our last append
    rows: bytearray = field(default_factory=bytearray)  # one `ROW` per line
    keys: bytearray = field(default_factory=bytearray)  # the lines' keys, UTF-8, back to back
    count: int = 0
    saved: int = 0  # how many of the rows its records file holds (`agent.store.records_file`)
    saved_keys: int = 0  # … and how many bytes of `keys`
    saved_end: int = 0  # … and where the last of them ends in the shard

    def __post_init__(self) -> None:
        if self.base < 0:
            self.base = self.start

    def append(self, line: Line, labels: int, tools: int) -> None:
        key = line.key.encode("utf-8")
        self.rows += ROW.pack(
            line.offset, line.length, line.number, line.crc, len(key), line.tombstone, labels, tools
        )
        self.keys += key
        self.count += 1

    @property
    def lines(self) -> Iterator[Line]:
        at = 0
        for offset, length, number, crc, size, tombstone, labels, tools in ROW.iter_unpack(self.rows):
            key = self.keys[at : at + size].decode("utf-8")
            at += size
            yield Line(
                offset, length, number, key, bool(tombstone), self.names[labels], self.names[tools], crc
            )


def line_of(offset: int, data: bytes, entry: dict[str, Any]) -> Line | None:
    """What is kept of one appended line (`data`, newline-terminated, parsed as `entry`); None
    when its key is not its own `metadata.prompt_key`."""
    metadata = entry.get("metadata")
    key = metadata.get("prompt_key") if isinstance(metadata, dict) else None
    if not isinstance(key, str) or not key:
        return None
    number = entry.get("prompt_index")
    index = number if isinstance(number, int) and not isinstance(number, bool) else -1
    stats = entry.get("tool_stats")
    tools = tuple(stats) if isinstance(stats, dict) else ()
    listed = metadata.get("discard_reasons") if isinstance(metadata, dict) else None
    labels = tuple(str(reason) for reason in listed) if isinstance(listed, list) else ()
    body = data.rstrip(b"\r\n")
    return Line(offset, len(body), index, key, is_tombstone(entry), labels, tools, zlib.crc32(body))


class ShardRecords:
    """The lines this process appended, per batch file name; `usable` until one could not be
    recorded."""

    def __init__(self) -> None:
        self.shards: dict[str, Shard] = {}
        self.usable = True
        # each tuple of names once, a line holding its number: an entry lists every tool it was
        # offered, the same few tuples for a whole run (a copy per line would cost ~1 KiB)
        self._ids: dict[tuple[str, ...], int] = {}
        self._names: list[tuple[str, ...]] = []
        self.names_saved = 0  # how many of `names` the run directory holds (`records_file`)

    def add(self, path: Path, offset: int, data: bytes, entry: dict[str, Any] | None) -> Line | None:
        """Record one appended line (`entry` None: it did not parse, so nothing is trusted)."""
        if not self.usable:
            return None
        shard = self.shards.get(path.name) or self.shards.setdefault(path.name, Shard(offset, self._names))
        line = line_of(offset, data, entry) if entry is not None else None
        if line is None or offset != (shard.end or shard.start):
            self.forget()
            return None
        self.extend(shard, line, len(data))
        status = os.stat(path)
        shard.stamp = (status.st_ino, status.st_mtime_ns)
        return line

    def extend(self, shard: Shard, line: Line, size: int) -> None:
        """`shard` with `line` (`size` bytes with its newline) recorded after its last one."""
        shard.append(line, self.name_id(line.labels), self.name_id(line.tools))
        shard.end = line.offset + size

    @property
    def names(self) -> list[tuple[str, ...]]:
        """The table of name tuples the rows' ids refer to (shared by every shard)."""
        return self._names

    def start_names(self, table: list[tuple[str, ...]]) -> None:
        """Start from the run's saved table (before anything is recorded: ids keep their tuple)."""
        if self._names:
            raise RuntimeError("the table of names is started before anything is recorded")
        for names in table:
            self._ids.setdefault(names, len(self._names))
            self._names.append(names)
        self.names_saved = len(table)

    def adopt(self, name: str, shard: Shard) -> None:
        """Take a shard loaded from its saved records (`agent.store.records_file.load`)."""
        if self.usable:
            self.shards[name] = shard

    def name_id(self, names: tuple[str, ...]) -> int:
        found = self._ids.get(names)
        if found is None:
            found = self._ids[names] = len(self._names)
            self._names.append(names)
        return found

    def forget(self) -> None:
        self.shards.clear()
        self.usable = False

    def unchanged(self, directory: Path) -> bool:
        """Whether every recorded shard is as this process left it."""
        for name, shard in self.shards.items():
            try:
                status = os.stat(directory / name)
            except FileNotFoundError:
                return False
            if status.st_size != shard.end or (status.st_ino, status.st_mtime_ns) != shard.stamp:
                return False
        return True

    def of(self, path: Path) -> Shard | None:
        return self.shards.get(path.name) if self.usable else None
