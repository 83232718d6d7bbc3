"""Filters re-applied when a run starts, both ways, without a model call.

`discarded.jsonl` keeps each filtered entry whole (it was paid for). When the run's config
keeps every reason the entry fails (`RunConfig.keeps`, after the `KEPT_BY` table), the entry
is appended to its shard as a result line — merged and counted like any other, its
`metadata.discard_reasons` kept as its label (`recover_discards`). The other way, a kept entry
whose label names a filter the run does not keep goes to discarded.jsonl (a record marked
`moved_from_output`) and a tombstone follows its result line in its shard, so the scan calls
its prompt discarded and the merge leaves it out (`withdraw_kept`). A key's last line in its
shard decides, so an entry can move back and forth as runs keep and drop its filter.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.batch.events import Discarded, Failed, Finished, WorkerEvent, sample_fields
from agent.config.run_config import KEPT_BY_MODE, RunConfig, kept_by
from agent.protocols import RunStore, StoredKeys
from agent.protocols.store import KnownKeys, MergeSummary
from agent.store.index import discard_reasons
from agent.store.jsonl import encode_line, read_lines
from agent.store.key_book import index_hint
from agent.store.keys import KeyResolver, is_tombstone, record_key
from agent.store.layout import DISCARDED_FILE, batch_files
from agent.store.merge import UNKNOWN_TOOL_REASON
from agent.toolbox.registry import TOOL_TO_TOOLSET_MAP

log = logging.getLogger("agent.batch.run")


def reapply_filters(
    config: RunConfig, store: RunStore, stored: StoredKeys
) -> tuple[Counter[str], Counter[str]]:
    """(withdrawn, recovered) per reason: the run's filters applied again to what is stored."""
    restore_unrecorded(config, store, stored)
    withdrawn = withdraw_kept(config, store, stored)
    for reason, count in sorted(withdrawn.items()):
        log.warning("moved %d kept %s entries to discarded.jsonl: this run does not keep them", count, reason)
    recovered = recover_discards(config, store, stored)
    for reason, count in sorted(recovered.items()):
        log.warning("moved %d %s discard(s) into the output: this run keeps them", count, reason)
    return withdrawn, recovered


def restore_unrecorded(config: RunConfig, store: RunStore, stored: StoredKeys) -> int:
    """Put back into the output the withdrawn entries whose discard record is gone (a
    withdrawal appends its record before its tombstone, so only an edit of discarded.jsonl
    leaves a tombstone after a result line without one: the entry would be in neither file).
    Each is appended to its shard again, as a recovered discard is, where this run's filters
    and --keep judge it anew: nothing lost, no model call. A tombstone with no result before it
    (another tool's discard marker) stays a discard. Returns how many."""
    restored = 0
    for key, entry in shard_entries(config.run_dir, stored.unrecorded) if stored.unrecorded else ():
        store.append_result(batch_of(entry, {}, config.batch_size), entry)
        mark_recovered(stored, key)
        if reasons := discard_reasons(entry):  # the filters it fails, judged next (`withdraw_kept`)
            stored.labels[key] = reasons
        restored += 1
    if restored:
        log.warning(
            "%d entries moved out of the output have no record in discarded.jsonl (was it edited?): "
            "put back into the output, where this run's filters and --keep judge them again",
            restored,
        )
    return restored


def recover_discards(config: RunConfig, store: RunStore, stored: StoredKeys) -> Counter[str]:
    """Move the discards whose filters are all off into the output; returns how many per
    reason. `stored.done` gains their keys."""
    recovered: Counter[str] = Counter()
    for _line, record in read_lines(config.run_dir / DISCARDED_FILE):
        key = record_key(record)
        if record is None or key is None or key in stored.done:
            continue
        reason, entry = str(record.get("reason")), record.get("entry")
        if reason in KEPT_BY_MODE:  # --keep's: judged again from the data (agent.batch.keeping)
            continue
        if isinstance(entry, dict) and all(config.keeps(r) for r in discard_reasons(entry) or [reason]):
            store.append_result(batch_of(entry, record, config.batch_size), entry)
            mark_recovered(stored, key)
            recovered[reason] += 1
    return recovered


def withdraw_kept(config: RunConfig, store: RunStore, stored: StoredKeys) -> Counter[str]:
    """Move the kept entries whose label names a filter the run does not keep to
    discarded.jsonl; returns how many per reason. Reads the batch files again only when the
    scan found such an entry."""
    unkept = {key for key, reasons in stored.labels.items() if not all(map(config.keeps, reasons))}
    withdrawn: Counter[str] = Counter()
    if not unkept:
        return withdrawn
    for key, entry in shard_entries(config.run_dir, unkept):
        reason = next((r for r in discard_reasons(entry) if not config.keeps(r)), None)
        if reason is None:  # the line itself names no filter the run drops: it stays
            continue
        _withdraw(store, key, reason, entry, config.batch_size)
        mark_withdrawn(stored, key)
        withdrawn[reason] += 1
    return withdrawn


def shard_entries(run_dir: Path, keys: Collection[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, entry) of the first result line of each of `keys` in the batch files."""
    seen: set[str] = set()
    resolver = KeyResolver()
    for path in batch_files(run_dir):
        for _line, entry in read_lines(path):
            key = resolver.result_key(entry) if entry is not None else None
            if entry is None or key is None or key in seen or key not in keys or is_tombstone(entry):
                continue
            seen.add(key)
            yield key, entry


def mark_withdrawn(stored: StoredKeys, key: str) -> None:
    """`stored` after `key`'s entry moved from the output to discarded.jsonl."""
    stored.done.discard(key)
    stored.discarded.add(key)
    stored.tombstoned.add(key)


def mark_recovered(stored: StoredKeys, key: str) -> None:
    """`stored` after `key`'s discard moved back into the output."""
    stored.done.add(key)
    stored.tombstoned.discard(key)
    stored.unrecorded.discard(key)


def merge_output(
    config: RunConfig, store: RunStore, on_entry: Callable[[dict[str, Any]], None], withdrawn: Collection[str]
) -> tuple[MergeSummary, Counter[str]]:
    """Merge trajectories.jsonl, the `withdrawn` keys left out; an entry calling a tool the
    registry does not know is kept (labelled) when the run keeps malformed entries, else moved
    to discarded.jsonl: never dropped without a record. Returns the merge and the moves."""
    keep = config.keeps(UNKNOWN_TOOL_REASON)
    merged = store.merge(set(TOOL_TO_TOOLSET_MAP), on_entry, exclude=withdrawn, keep_unknown=keep)
    return merged, withdraw_unkept(config, store, merged.unkept)


def withdraw_unkept(
    config: RunConfig, store: RunStore, unkept: list[tuple[str, dict[str, Any]]]
) -> Counter[str]:
    """Move the entries the merge did not keep (calling tools the registry does not know, the
    run not keeping malformed entries) to discarded.jsonl; returns how many per reason."""
    for key, entry in unkept:
        _withdraw(store, key, UNKNOWN_TOOL_REASON, entry, config.batch_size)
    return Counter({UNKNOWN_TOOL_REASON: len(unkept)} if unkept else {})


def _withdraw(store: RunStore, key: str, reason: str, entry: dict[str, Any], batch_size: int) -> None:
    """The discard record first: a crash between the two lines leaves the entry in both
    files, still in the output (its key's last line is its result), never in neither."""
    record = withdrawal(key, reason, entry)
    store.append_discard({**record, "moved_from_output": True, "entry": entry})
    append_tombstone(store, record, entry, batch_size)


def withdrawal(key: str, reason: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a withdrawn entry's discard record and its tombstone share."""
    record = {
        "prompt_key": key,
        **sample_fields(key),
        "prompt_index": entry.get("prompt_index"),
        "reason": reason,
    }
    record["timestamp"] = datetime.now().isoformat()
    return record


def append_tombstone(
    store: RunStore, record: Mapping[str, Any], entry: Mapping[str, Any], batch_size: int
) -> None:
    """The line after an entry's result in its shard that withdraws it from the output (its
    discard record written before: see `_withdraw`)."""
    batch = batch_of(entry, record, batch_size)
    key = record["prompt_key"]
    store.append_result(
        batch, {**record, "discarded": True, "metadata": {"prompt_key": key, "batch_num": batch}}
    )


def current_discards(run_dir: Path, output: KnownKeys) -> Iterator[dict[str, Any]]:
    """The entries of discarded.jsonl whose prompt is not in the output, one per prompt."""
    seen: set[str] = set()  # not a copy of `output`: at a million prompts, ~40 MB at the end
    for _line, record in read_lines(run_dir / DISCARDED_FILE):
        key = record_key(record)
        if key is None or record is None or key in seen or not isinstance(entry := record.get("entry"), dict):
            continue
        if not output.has(key, index_hint(record.get("prompt_index"))):
            seen.add(key)
            yield entry


def filter_warnings(discards: Mapping[str, int], entries: int) -> list[dict[str, Any]]:
    """The filters whose discards (`discards`, by reason) are most (> 50 %) of the run's
    `entries`, each with the flag that keeps what it drops (None when no flag does)."""
    return [
        {
            "reason": reason,
            "discarded": count,
            "entries": entries,
            "kept_by": kept_by(reason),
        }
        for reason, count in sorted(discards.items())
        if 2 * count > entries
    ]


def write_answer(store: RunStore, event: WorkerEvent, batch_size: int, attempt: int) -> None:
    """Write a worker's answer (`attempt`: a failure's number). A token sidecar line goes before
    its entry's line, in the shard the entry is (or, recovered, will be) in: an entry on disk
    always has its tokens there; a line whose entry never reached the disk is never merged."""
    match event:
        case Finished():
            if event.tokens_line is not None:
                store.append_tokens(event.batch_num, event.tokens_line, event.line)
            store.append_result(event.batch_num, event.line)
        case Discarded():
            record = event.record()
            if event.tokens_line is not None:
                batch = batch_of(event.entry, record, batch_size)
                store.append_tokens(batch, event.tokens_line, encode_line(record))
            store.append_discard(record)
        case Failed():
            store.append_failure(event.record(attempt=attempt))


def batch_of(entry: Mapping[str, Any], record: Mapping[str, Any], batch_size: int) -> int:
    """The shard the entry was made for (its `metadata.batch_num`), else its index's."""
    metadata = entry.get("metadata")
    number = metadata.get("batch_num") if isinstance(metadata, dict) else None
    if isinstance(number, int) and not isinstance(number, bool) and number >= 0:
        return number
    index = record.get("prompt_index", entry.get("prompt_index"))
    return index // batch_size if isinstance(index, int) and index >= 0 else 0
