"""An entry's figures, as statistics.json sums them over the merged output: whether it
completed or stopped partway, its model calls, its outcome and its usage (tokens, USD).

The run knows them of each entry it writes from the entry's event, before the merge reads the
entry back (`agent.batch.tally`): the merged output's statistics take those, and the merge only
checks them against the entry (`EntryFigures.of`); an entry of an earlier invocation is read.
"""

from __future__ import annotations

import json
import struct
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

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
# partial, usage present); the key, the outcome and the usage's JSON follow.
_HEAD = struct.Struct("<IIIqB")
DENSE = 1 << 20  # how far past the indices held the table grows for a new one


class FiguresTable:
    """key -> the `EntryFigures` counted of the entry written, for the prompts of one run,
    packed (issue 26): a row of bytes per entry in one bytearray, found by the entry's
    `prompt_index` (a key has one in a run: `agent.store.numbering`). ~130 bytes an
    entry, where a dict of frozen dataclasses and their usage dicts held ~650."""

    def __init__(self) -> None:
        self._rows = bytearray()
        self._at = array("q")  # prompt_index -> its row's offset in `_rows`, -1 for none
        self._far: dict[int, int] = {}  # the same, for an index far past the others (hand-edited)
        self._count = 0
        # The row put last, as given: the run asks for it right after (its merge check, as it
        # appends the entry), and need not parse its usage back.
        self._last: tuple[int, str, EntryFigures] | None = None

    def put(self, key: str, index: int, figures: EntryFigures) -> None:
        """The figures of `key`'s entry (at `prompt_index` `index`), replacing earlier ones."""
        if index < 0:
            raise ValueError(f"a prompt index is never negative: {index}")
        if index in self._far or index >= 2 * len(self._at) + DENSE:
            self._count += index not in self._far
            self._far[index] = len(self._rows)
        else:
            if index >= len(self._at):
                self._at.extend([-1] * max(index + 1 - len(self._at), len(self._at) // 2))
            self._count += self._at[index] < 0
            self._at[index] = len(self._rows)
        key_bytes, outcome = key.encode("utf-8"), figures.outcome.encode("utf-8")
        usage = b"" if figures.usage is None else json.dumps(figures.usage).encode("utf-8")
        flags = figures.completed | figures.partial << 1 | (figures.usage is not None) << 2
        self._rows += _HEAD.pack(len(key_bytes), len(outcome), len(usage), figures.api_calls, flags)
        self._rows += key_bytes + outcome + usage
        self._last = (index, key, figures)

    def get(self, key: str, index: object) -> EntryFigures | None:
        """The figures counted of `key`'s entry at `index`; None when there are none."""
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            return None
        if self._last is not None and self._last[0] == index and self._last[1] == key:
            return self._last[2]
        at = self._at[index] if index < len(self._at) else -1
        at = self._far.get(index, -1) if at < 0 else at
        if at < 0 or self._key(at) != key:
            return None
        key_size, outcome_size, usage_size, api_calls, flags = _HEAD.unpack_from(self._rows, at)
        start = at + _HEAD.size + key_size
        outcome = self._rows[start : start + outcome_size].decode("utf-8")
        usage = self._rows[start + outcome_size : start + outcome_size + usage_size]
        parsed = json.loads(usage) if flags & 4 else None
        return EntryFigures(bool(flags & 1), bool(flags & 2), api_calls, outcome, parsed)

    def __iter__(self) -> Iterator[str]:
        """The keys, in prompt_index order."""
        for at in [*self._at, *self._far.values()]:
            if at >= 0:
                yield self._key(at)

    def __len__(self) -> int:
        return self._count

    def _key(self, at: int) -> str:
        size = _HEAD.unpack_from(self._rows, at)[0]
        return self._rows[at + _HEAD.size : at + _HEAD.size + size].decode("utf-8")
