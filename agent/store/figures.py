"""An entry's figures, as statistics.json sums them over the merged output: whether it
completed or stopped partway, its model calls, its outcome and its usage (tokens, USD).

The run knows them of each entry it writes from the entry's event, before the merge reads the
entry back (`agent.batch.tally`): the merged output's statistics take those, and the merge only
checks them against the entry (`EntryFigures.of`); an entry of an earlier invocation is read.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import tempfile
import weakref
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, BinaryIO

from agent.store.durable import TEMP_SUFFIX
from agent.store.jsonl import json_int


@dataclass(frozen=True)
class EntryFigures:
    completed: bool
    partial: bool
    api_calls: int
    outcome: str
    usage: Mapping[str, Any] | None  # OpenAI-style token counts, and `cost_usd` when known

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> EntryFigures:
        """The figures the entry itself holds."""
        metadata = entry.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        usage = metadata.get("usage")
        return cls(
            entry.get("completed") is True,
            entry.get("partial") is True,
            json_int(entry.get("api_calls")),
            str(metadata.get("outcome") or "unknown"),
            usage if isinstance(usage, dict) else None,
        )

    def differences(self, other: EntryFigures) -> list[str]:
        """The names of the figures that differ from `other`'s."""
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]


# A table row's head: key length, outcome length, usage length, api_calls, flags (completed,
# partial, usage present), prompt_index; the key, the outcome and the usage's JSON follow.
_HEAD = struct.Struct("<IIIqBq")
_READ = _HEAD.size + 256  # one read holds most rows whole
DENSE = 1 << 20  # how far past the indices held the table grows for a new one
SPILL_BYTES = 1 << 20  # rows held in memory before they go to the table's file

log = logging.getLogger("agent.store")


class FiguresTable:
    """key -> the `EntryFigures` counted of the entry written, for the prompts of one run,
    packed (issue 26): a row of bytes per entry, found by the entry's `prompt_index` (a key
    has one in a run: `agent.store.numbering`). The rows go, a MiB at a time, to an unnamed
    file in `spill_dir` (gone with the process, even killed): the run reads one back only to
    count a line again (`get`) and once at its end (`__iter__`), so memory holds 8 bytes an
    entry where the rows held ~150 (and a dict of frozen dataclasses ~650)."""

    def __init__(self, spill_dir: Path | None = None, spill_bytes: int = SPILL_BYTES) -> None:
        self._rows = bytearray()  # the rows not in the file yet
        self._spilled = 0  # bytes in the file: `_rows` starts there
        self._file: BinaryIO | None = None
        self._spill_dir, self._spill_bytes = spill_dir, spill_bytes
        self._at = array("q")  # prompt_index -> its row's offset, -1 for none
        self._far: dict[int, int] = {}  # the same, for an index far past the others (hand-edited)
        self._count = 0
        # The row put last, as given: the run asks for it right after (its merge check, as it
        # appends the entry), and need not read its row back.
        self._last: tuple[int, str, EntryFigures] | None = None

    def put(self, key: str, index: int, figures: EntryFigures) -> None:
        """The figures of `key`'s entry (at `prompt_index` `index`), replacing earlier ones."""
        if index < 0:
            raise ValueError(f"a prompt index is never negative: {index}")
        at = self._spilled + len(self._rows)
        if index in self._far or index >= 2 * len(self._at) + DENSE:
            self._count += index not in self._far
            self._far[index] = at
        else:
            if index >= len(self._at):
                self._at.extend([-1] * max(index + 1 - len(self._at), len(self._at) // 2))
            self._count += self._at[index] < 0
            self._at[index] = at
        key_bytes, outcome = key.encode("utf-8"), figures.outcome.encode("utf-8")
        usage = b"" if figures.usage is None else json.dumps(figures.usage).encode("utf-8")
        flags = figures.completed | figures.partial << 1 | (figures.usage is not None) << 2
        self._rows += _HEAD.pack(len(key_bytes), len(outcome), len(usage), figures.api_calls, flags, index)
        self._rows += key_bytes + outcome + usage
        self._last = (index, key, figures)
        if len(self._rows) >= self._spill_bytes:
            self._spill()

    def get(self, key: str, index: object) -> EntryFigures | None:
        """The figures counted of `key`'s entry at `index`; None when there are none."""
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            return None
        if self._last is not None and self._last[0] == index and self._last[1] == key:
            return self._last[2]
        at = self._at[index] if index < len(self._at) else -1
        at = self._far.get(index, -1) if at < 0 else at
        if at < 0:
            return None
        row = self._read(at, _READ)
        size = _row_size(row, 0)
        row = row if len(row) >= size else self._read(at, size)
        found, _index, figures = _parse(row, 0)
        return figures if found == key else None

    def __iter__(self) -> Iterator[str]:
        """The keys, in the order their rows were written (one pass over the file)."""
        return (key for key, _index in self.items())

    def items(self) -> Iterator[tuple[str, int]]:
        """Each (key, index), in the order their rows were written (one pass over the file)."""
        for at, index, key in self._walk():
            current = self._at[index] if index < len(self._at) else -1
            if (current if current >= 0 else self._far.get(index, -1)) == at:
                yield key, index

    def __len__(self) -> int:
        return self._count

    def _spill(self) -> None:
        try:
            if self._file is None:
                # O_TMPFILE: never named (where it is, a `.*.tmp` name for a moment, which the
                # next start's repair removes); closed with the table, not by the collector
                temp = tempfile.TemporaryFile(prefix=".figures.", suffix=TEMP_SUFFIX, dir=self._spill_dir)  # noqa: SIM115
                self._file = temp
                weakref.finalize(self, self._file.close)
            self._file.write(self._rows)
            self._file.flush()
        except OSError as exc:  # the rows stay in memory: the run goes on, as before this table
            log.warning("the run's figures stay in memory (%s)", exc)
            self._spill_bytes = 1 << 62
            return
        self._spilled += len(self._rows)
        self._rows = bytearray()

    def _read(self, at: int, size: int) -> bytes:
        if at >= self._spilled:
            return bytes(self._rows[at - self._spilled : at - self._spilled + size])
        assert self._file is not None
        return os.pread(self._file.fileno(), size, at)

    def _walk(self) -> Iterator[tuple[int, int, str]]:
        """(offset, prompt_index, key) of every row written."""
        carry, done = b"", 0
        for chunk in self._chunks():
            data, pos = carry + chunk, 0
            while len(data) - pos >= _HEAD.size and len(data) - pos >= (size := _row_size(data, pos)):
                key, index, _figures = _parse(data, pos, figures=False)
                yield done + pos, index, key
                pos += size
            done, carry = done + pos, data[pos:]

    def _chunks(self) -> Iterator[bytes]:
        for at in range(0, self._spilled, 1 << 22):
            yield self._read(at, min(1 << 22, self._spilled - at))
        yield bytes(self._rows)


def _row_size(data: bytes, pos: int) -> int:
    key_size, outcome_size, usage_size = _HEAD.unpack_from(data, pos)[:3]
    return int(_HEAD.size + key_size + outcome_size + usage_size)


def _parse(data: bytes, pos: int, *, figures: bool = True) -> tuple[str, int, EntryFigures | None]:
    """The key, prompt_index and (with `figures`) figures of the row at `pos`."""
    key_size, outcome_size, usage_size, api_calls, flags, index = _HEAD.unpack_from(data, pos)
    start = pos + _HEAD.size
    key = data[start : start + key_size].decode("utf-8")
    if not figures:
        return key, index, None
    start += key_size
    outcome = data[start : start + outcome_size].decode("utf-8")
    usage = data[start + outcome_size : start + outcome_size + usage_size]
    parsed = json.loads(usage) if flags & 4 else None
    return key, index, EntryFigures(bool(flags & 1), bool(flags & 2), api_calls, outcome, parsed)
