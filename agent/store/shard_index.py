"""What this process appended to each batch file, line by line, so the end of a run neither
scans nor parses those lines again (issue 26: the end of a run is O(1) in its size for the
user's wait).

`RunDirectory` parses each result line once, as it appends it, and keeps here what the scan
(`agent.store.index`) and the merge (`agent.store.merge`) read of a line: its offset and
length, `prompt_index`, key, whether it is a tombstone, its labels and tool names, and a CRC
of its bytes. A shard's part written before this process (an earlier invocation's) is not
here: it is read from the file as before. Kept lines are trusted only while the shard is as
this process left it (`ShardRecords.unchanged`: size, inode and mtime after our last append);
the merge checks each line's CRC as it copies it (`ShardChanged` on a difference). A line
without a `metadata.prompt_key` is never recorded: its key depends on every line before it
(`KeyResolver`), so the records are dropped and the files read as before.
"""

from __future__ import annotations

import os
import zlib
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


@dataclass
class Shard:
    start: int  # the file's size before this process's first append: lines from here are ours
    end: int = 0  # its size after our last append
    stamp: tuple[int, int] = (0, 0)  # (inode, mtime_ns) after our last append
    lines: list[Line] = field(default_factory=list)


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
        # one copy of each tuple of names: an entry lists every tool it was offered, the same
        # few tuples for a whole run (a copy per line would cost ~1 KiB of the parent's memory)
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}

    def add(self, path: Path, offset: int, data: bytes, entry: dict[str, Any] | None) -> Line | None:
        """Record one appended line (`entry` None: it did not parse, so nothing is trusted)."""
        if not self.usable:
            return None
        shard = self.shards.setdefault(path.name, Shard(start=offset))
        line = line_of(offset, data, entry) if entry is not None else None
        if line is None or offset != (shard.end or shard.start):
            self.forget()
            return None
        line = line._replace(tools=self._shared(line.tools), labels=self._shared(line.labels))
        shard.lines.append(line)
        shard.end = offset + len(data)
        status = os.stat(path)
        shard.stamp = (status.st_ino, status.st_mtime_ns)
        return line

    def _shared(self, names: tuple[str, ...]) -> tuple[str, ...]:
        return self._names.setdefault(names, names)

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
