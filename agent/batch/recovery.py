"""Filters re-applied when a run starts: a discard whose filter is now off joins the output.

`discarded.jsonl` keeps each filtered entry whole (it was paid for). When the run's config
keeps that reason (`RunConfig.keeps`, after the `KEPT_BY` table), the entry is appended to its
shard as a result line — merged and counted like any other, without a model call. Its key is
then done, so a later start never adds it again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from agent.config.run_config import KEPT_BY, RunConfig
from agent.protocols import RunStore, StoredKeys
from agent.store.jsonl import read_lines
from agent.store.keys import record_key
from agent.store.layout import DISCARDED_FILE


def recover_discards(config: RunConfig, store: RunStore, stored: StoredKeys) -> Counter[str]:
    """Move the discards whose filter is off into the output; returns how many per reason.
    `stored.done` gains their keys."""
    recovered: Counter[str] = Counter()
    for _line, record in read_lines(config.run_dir / DISCARDED_FILE):
        key = record_key(record)
        if record is None or key is None or key in stored.done:
            continue
        reason, entry = str(record.get("reason")), record.get("entry")
        if isinstance(entry, dict) and all(config.keeps(r) for r in _reasons(entry, reason)):
            entry = _without_reasons(entry)
            store.append_result(_batch_of(entry, record, config.batch_size), entry)
            stored.done.add(key)
            recovered[reason] += 1
    return recovered


def filter_warnings(discards: Mapping[str, int], entries: int) -> list[dict[str, Any]]:
    """The filters that dropped most (> 50 %) of this run's entries, each with the flag that
    keeps what it drops (None when no flag does)."""
    return [
        {
            "reason": reason,
            "discarded": count,
            "entries": entries,
            "kept_by": f"--{KEPT_BY[reason]}" if reason in KEPT_BY else None,
        }
        for reason, count in sorted(discards.items())
        if 2 * count > entries
    ]


def _reasons(entry: Mapping[str, Any], reason: str) -> list[str]:
    """Every filter that discarded the entry (`metadata.discard_reasons`), else its one reason:
    it is recovered only when the run keeps them all."""
    metadata = entry.get("metadata")
    listed = metadata.get("discard_reasons") if isinstance(metadata, dict) else None
    return [str(r) for r in listed] if isinstance(listed, list) and listed else [reason]


def _without_reasons(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry as a finished prompt's: without the discard's bookkeeping."""
    metadata = entry.get("metadata")
    if not isinstance(metadata, dict) or "discard_reasons" not in metadata:
        return entry
    return {**entry, "metadata": {k: v for k, v in metadata.items() if k != "discard_reasons"}}


def _batch_of(entry: Mapping[str, Any], record: Mapping[str, Any], batch_size: int) -> int:
    """The shard the entry was made for (its `metadata.batch_num`), else its index's."""
    metadata = entry.get("metadata")
    number = metadata.get("batch_num") if isinstance(metadata, dict) else None
    if isinstance(number, int) and not isinstance(number, bool) and number >= 0:
        return number
    index = record.get("prompt_index", entry.get("prompt_index"))
    return index // batch_size if isinstance(index, int) and index >= 0 else 0
