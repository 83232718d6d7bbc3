"""The result lines earlier invocations appended, handed out during a resumed run to be counted
(issue 26: the end of a run is O(1) in its size for the user's wait, a resume's end included).

A resume loads the records of the lines before it (`agent.store.records_file`), so the merge
need not scan them; but the merged output's statistics and report count every line, and a line
this process did not append was parsed and counted by the end's merge: 17 s at 200,000 prompts
killed halfway. `EarlierLines.take` hands those lines out parsed, in the merge's file order, a
few at a time, for the caller to count as it counts its own appends. Once a shard's earlier
lines are all handed out, the whole shard counts as this process's (`Shard.start` 0): the end's
merge copies it unparsed, and `merge_ahead` can copy it during the run. The first lines of a
shard the figures the last end kept count already (`agent.store.output_figures`) are skipped.

A shard holding a tombstone (its withdrawn line is not merged, so it must not be counted) or a
line calling a tool the registry does not know (the merge labels it first) is left to the end,
which parses it as before (unless its first lines are counted: `ShardChanged` then). Each line's
bytes are checked against its record's CRC before it is parsed; a line that differs (the shard
edited since) raises `ShardChanged`, and nothing is handed out after it: what the caller counted
is then wrong, and its count is redone from the files.
"""

from __future__ import annotations

import os
import zlib
from collections import deque
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from agent.store.jsonl import parse_object
from agent.store.layout import batch_files
from agent.store.merge_shard import plain_rows
from agent.store.shard_index import ROW, Shard, ShardChanged, ShardRecords


class EarlierLines:
    """The recorded shards whose first lines an earlier invocation appended, in the merge's
    order, and how far each is handed out."""

    def __init__(
        self,
        directory: Path,
        records: ShardRecords,
        valid_tools: Collection[str],
        counted: Mapping[str, int] | None = None,
    ) -> None:
        """`counted`: how many first rows of a shard are counted already (`output_figures`)."""
        self.directory, self.records, self.valid_tools = directory, records, valid_tools
        counts = {path.name: earlier_rows(records.of(path)) for path in batch_files(directory)}
        self._first = {name: (counted or {}).get(name, 0) for name in counts}
        # each shard's earlier lines, and the first of them to hand out
        self._rows = {name: rows for name, rows in counts.items() if rows > self._first[name]}
        self._queue = deque(self._rows)  # in the merge's order
        self.left = sum(rows - self._first[name] for name, rows in self._rows.items())  # not handed out yet
        self._row = self._head_start()  # the next row of the first shard in the queue to hand out
        self._stopped = False

    def waiting(self, name: str) -> bool:
        """Whether batch file `name` still has earlier lines to hand out (not copyable yet)."""
        return name in self._rows

    def take(self, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` earlier lines, parsed (tombstones never among them); [] once all are
        handed out or a shard changed (`ShardChanged`, raised once)."""
        taken: list[dict[str, Any]] = []
        while self._queue and len(taken) < limit and not self._stopped:
            name = self._queue[0]
            shard, rows = self.records.of(self.directory / name), self._rows[name]
            starting = self._row == self._first[name]
            if shard is None or (starting and not plain_rows(shard, 0, self.valid_tools)):
                if self._first[name]:  # its first lines counted already: the end must count all
                    self._stopped = True
                    raise ShardChanged(f"{name}: partly counted, now with a tombstone or an unknown tool")
                self._drop()  # left for the end's merge, which parses it
                continue
            count = min(rows - self._row, limit - len(taken))
            try:
                taken += _read(self.directory / name, shard, self._row, count)
            except (ShardChanged, OSError):
                self._stopped = True
                raise ShardChanged(f"{name}: a line an earlier invocation wrote changed") from None
            self._row += count
            self.left -= count
            if self._row == rows:
                shard.start = 0  # every line of it is counted now, as this process's are
                del self._rows[self._queue.popleft()]
                self._row = self._head_start()
        return taken

    def _drop(self) -> None:
        """The first shard left to the end (its lines not handed out yet are no longer counted)."""
        self.left -= self._rows.pop(self._queue.popleft()) - self._row
        self._row = self._head_start()

    def _head_start(self) -> int:
        """The first row to hand out of the shard first in the queue (those before it are counted)."""
        return self._first[self._queue[0]] if self._queue else 0


def earlier_rows(shard: Shard | None) -> int:
    """How many of `shard`'s rows describe lines before this process's first append: a prefix,
    since each row begins where the one before it ended."""
    if shard is None or shard.start == 0:
        return 0
    low, high = 0, shard.count
    while low < high:
        middle = (low + high) // 2
        if ROW.unpack_from(shard.rows, middle * ROW.size)[0] < shard.start:
            low = middle + 1
        else:
            high = middle
    return low


def _read(path: Path, shard: Shard, first: int, count: int) -> list[dict[str, Any]]:
    """Rows `first` to `first + count` of `shard` read in one call, checked and parsed."""
    rows = [ROW.unpack_from(shard.rows, (first + i) * ROW.size) for i in range(count)]
    begin = rows[0][0]
    end = rows[-1][0] + rows[-1][1]
    with path.open("rb") as handle:
        data = os.pread(handle.fileno(), end - begin, begin)
    entries = []
    for offset, length, _number, crc, *_rest in rows:
        line = data[offset - begin : offset - begin + length]
        entry = parse_object(line) if len(line) == length and zlib.crc32(line) == crc else None
        if entry is None:
            raise ShardChanged(f"{path.name}: a recorded line changed")
        entries.append(entry)
    return entries
