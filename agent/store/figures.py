"""An entry's figures, as statistics.json sums them over the merged output: whether it
completed or stopped partway, its model calls, its outcome and its usage (tokens, USD).

The run knows them of each entry it writes from the entry's event, before the merge reads the
entry back (`agent.batch.tally`): the merged output's statistics take those, and the merge only
checks them against the entry (`EntryFigures.of`); an entry of an earlier invocation is read.
"""

from __future__ import annotations

from collections.abc import Mapping
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
