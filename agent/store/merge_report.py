"""What a merge of the output did (`MergeReport`): statistics.json's `merge` section, and the
keys it wrote for the caller's completion check."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agent.protocols.store import KeyBook
from agent.store.key_book import KeySet
from agent.store.merge_shard import Copied
from agent.store.tool_counts import TOOL_ROWS

# not in statistics.json's `merge` section: keys, entries, what as_dict lists its own way
_HIDDEN = frozenset({"kept_keys", "unkept", "unkept_keys", "unknown_tools", "tokens", "counted_left_out"})


@dataclass
class MergeReport:
    files: int = 0
    written: int = 0
    duplicates: int = 0
    labelled: int = 0  # entries calling unknown tools, written with the label they lacked
    invalid_lines: int = 0
    unknown_tools: Counter[str] = field(default_factory=Counter)  # tool name -> entries calling it
    tombstones: int = 0
    withdrawn: int = 0  # result lines of keys a tombstone moved to discarded.jsonl
    not_kept: int = 0  # entries calling unknown tools, not written (`unkept`)
    counted_left_out: int = 0  # lines the caller counted as it wrote them that were not merged
    ahead_files: int = 0  # files copied during the run (`agent.store.merge_ahead`), not at the end
    in_place_files: int = 0  # files the output held already: continued in place (`agent.store.output_base`)
    # the keys written: the caller checks every prompt it calls done is among them
    kept_keys: KeyBook = field(default_factory=KeySet, repr=False)
    unkept: list[tuple[str, dict[str, Any]]] = field(default_factory=list, repr=False)  # (key, entry)
    unkept_keys: set[str] = field(default_factory=set, repr=False)  # their keys: a later line is a duplicate
    # --capture_tokens: the merged sidecar's counts (`TokenCounts`), None when the run captured none
    tokens: dict[str, Any] | None = field(default=None, repr=False)

    def add(self, copied: Copied) -> None:
        """Count lines merged by `copy_shard` (their keys are in `kept_keys` already)."""
        for name, value in copied._asdict().items():
            setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, Any]:
        """The `merge` section of statistics.json (counts, no keys or entries). The model
        invents unknown tools' names: the TOOL_ROWS most called are listed, the rest summed in
        `unknown_tools_other`, so the file does not grow with the names invented."""
        counts = {k: v for k, v in vars(self).items() if k not in _HIDDEN}
        listed = self.unknown_tools.most_common(TOOL_ROWS)
        rest = self.unknown_tools.total() - sum(n for _, n in listed)
        return {
            **counts,
            "unknown_tools": dict(listed),
            "unknown_tools_other": {"names": len(self.unknown_tools) - len(listed), "entries": rest},
        }
