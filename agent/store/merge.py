"""The merged output of a run: `trajectories.jsonl` rewritten from every batch file.

Each batch file is read in `prompt_index` order (its lines sorted by it, file order among equals; a
line without one first), so the output lists entries by prompt index — with --samples_per_prompt,
prompt-major: a prompt's samples in sample order — whatever order the workers finished in. A key's
lines share its index, so their file order is kept.

First line per prompt key wins; tombstones are never merged, nor the result lines of a key in
`exclude` (those a tombstone withdrew: their entry is in discarded.jsonl); a line that is not UTF-8,
not JSON, not an object or has no key is counted and skipped (the reference aborted its whole merge
on a non-object line). Kept lines are copied byte for byte as read, but for an entry calling a tool
the registry does not know: the reference dropped it, which lost a prompt the run called done. It is
labelled `tool_not_offered` in `metadata.discard_reasons` (the filter that discards such an entry)
and kept when `keep_unknown` (the run keeps malformed entries), else handed back in `unkept` for the
caller to move to discarded.jsonl.

With token sidecars in the directory (--capture_tokens), the same pass writes the merged sidecar,
line for line beside the output (`agent.store.token_merge`); without, none (and no stale one is
left).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from agent.protocols.store import KeyBook
from agent.store.jsonl import encode_line, parse_object
from agent.store.key_book import KeySet, index_hint
from agent.store.keys import KeyResolver, is_tombstone
from agent.store.layout import TRAJECTORIES_FILE, batch_files
from agent.store.merge_ahead import MergeAhead
from agent.store.merge_output import Start, merge_output
from agent.store.merge_report import MergeReport
from agent.store.merge_shard import Copied, copy_shard, copyable, in_index_order
from agent.store.output_base import OutputBase
from agent.store.shard_index import Line, Shard, ShardChanged, ShardRecords
from agent.store.token_merge import TokenMerge, open_sidecar
from agent.store.tool_counts import cut_name

UNKNOWN_TOOL_REASON = "tool_not_offered"  # a tool the registry does not know was offered to no one


def merge_run(
    directory: Path,
    valid_tools: Collection[str],
    on_entry: Callable[[dict[str, Any]], None] | None = None,
    output: str = TRAJECTORIES_FILE,
    exclude: Collection[str] = (),
    keep_unknown: bool = True,
    records: ShardRecords | None = None,
    counted: bool = False,
    ahead: MergeAhead | None = None,
    new_book: Callable[[], KeyBook] = KeySet,
    base: OutputBase | None = None,
) -> MergeReport:
    """Write `output` from every batch file: first line per prompt key, keys in `exclude` left
    out. Each kept line is copied as read (an entry calling unknown tools gains its label first,
    and is only kept with `keep_unknown`), newline-terminated. The lines in `records` (this
    process's appends) are not parsed, only checked (`ShardChanged`); with `counted`, the caller
    counted them already: `on_entry` gets only the other lines, and a recorded line left out is
    counted in `counted_left_out`. A new file is renamed over `output`, or the merge starts from
    `ahead` (files copied during the run) or `base` (`output` as the last end left it) where
    they still hold (`agent.store.merge_output`). The keys written are noted in a book
    `new_book` makes (`MergeReport.kept_keys`), or the ahead's when continued from it."""
    files = batch_files(directory)
    report, resolver = MergeReport(files=len(files), kept_keys=new_book()), KeyResolver()
    with ExitStack() as stack:
        sidecar = open_sidecar(stack, directory, output)
        start = Start(ahead, base, records if counted and sidecar is None else None, exclude, valid_tools)
        out, files = merge_output(stack, directory / output, files, report, start)
        rules = _Rules(valid_tools, exclude, keep_unknown, counted)
        for path in files:
            shard = records.of(path) if records is not None else None
            if copyable(shard, counted, sidecar is not None):
                assert shard is not None  # copyable
                if (copied := _copy_whole(path, shard, rules, report, out)) is not None:
                    report.add(copied)
                    continue
            lines = _keyed_lines(path, shard, resolver, report, sidecar)
            _copy_lines(lines, report, out, sidecar, rules, on_entry)
        report.tokens = None if sidecar is None else dict(vars(sidecar.counts))
    return report


class _Rules(NamedTuple):
    valid_tools: Collection[str]
    exclude: Collection[str]
    keep_unknown: bool
    counted: bool


def _copy_whole(path: Path, shard: Shard, rules: _Rules, report: MergeReport, out: BinaryIO) -> Copied | None:
    kept, unkept = report.kept_keys, report.unkept_keys
    return copy_shard(path, shard, rules.valid_tools, rules.exclude, kept, out, unkept)


def _copy_lines(
    lines: Iterator[_Line],
    report: MergeReport,
    out: BinaryIO,
    sidecar: TokenMerge | None,
    rules: _Rules,
    on_entry: Callable[[dict[str, Any]], None] | None,
) -> None:
    """The slow path: each line merged (or not) and written on its own."""
    for item in lines:
        merged = _merge_line(report, item, rules.valid_tools, rules.exclude, rules.keep_unknown)
        recorded = item.recorded
        if merged is None:
            report.counted_left_out += rules.counted and recorded is not None and not recorded.tombstone
            continue
        line, entry = merged
        out.write(line + b"\n")
        if sidecar is not None:
            sidecar.add(item.key, entry if entry is not None else _parsed(line))
        if on_entry is not None and not (rules.counted and recorded is not None):
            on_entry(entry if entry is not None else _parsed(line))


def _keyed_lines(
    path: Path,
    shard: Shard | None,
    resolver: KeyResolver,
    report: MergeReport,
    sidecar: TokenMerge | None,
) -> Iterator[_Line]:
    """A batch file's lines with a key, in the merge's order (bad lines counted, skipped)."""
    if sidecar is not None:
        sidecar.shard(path)
    for line, entry, recorded in in_index_order(path, shard):
        key = recorded.key if recorded is not None else _key(resolver, entry)
        if key is None:
            report.invalid_lines += 1
            continue
        yield _Line(line, entry, recorded, key)


class _Line(NamedTuple):
    """A batch-file line as the merge meets it: parsed (`entry`) or recorded (`recorded`)."""

    line: bytes
    entry: dict[str, Any] | None
    recorded: Line | None
    key: str


def _key(resolver: KeyResolver, entry: dict[str, Any] | None) -> str | None:
    return resolver.result_key(entry) if entry is not None else None


def _parsed(line: bytes) -> dict[str, Any]:
    entry = parse_object(line)
    if entry is None:  # its CRC matched what was written, which parsed
        raise ShardChanged("a recorded line no longer parses")
    return entry


def _merge_line(
    report: MergeReport,
    item: _Line,
    valid_tools: Collection[str],
    exclude: Collection[str],
    keep_unknown: bool,
) -> tuple[bytes, dict[str, Any] | None] | None:
    """The line to write (its entry when parsed), or None when it is not merged."""
    line, entry, recorded, key = item
    tombstone = (
        recorded.tombstone
        if recorded is not None
        else is_tombstone(_parsed(line) if entry is None else entry)
    )
    index = recorded.number if recorded is not None else index_hint((entry or {}).get("prompt_index"))
    if _passed_over(report, tombstone, key, index, exclude):
        return None
    tools = recorded.tools if recorded is not None else list(_tool_names(entry))
    if bad := [name for name in tools if name not in valid_tools]:
        report.unknown_tools.update(cut_name(tool) for tool in bad)
        line, entry = _labelled(line, _parsed(line) if entry is None else entry, report)
        if not _keeps(key, entry, keep_unknown, report):
            return None
    report.kept_keys.note(key, index)
    report.written += 1
    return line, entry


def _tool_names(entry: dict[str, Any] | None) -> list[Any]:
    stats = entry.get("tool_stats") if entry is not None else None
    return list(stats) if isinstance(stats, dict) else []


def _passed_over(
    report: MergeReport, tombstone: bool, key: str, index: int, exclude: Collection[str]
) -> bool:
    """Whether a line is not merged: a tombstone, a withdrawn key's or a key's second line."""
    if tombstone:
        report.tombstones += 1
    elif key in exclude:
        report.withdrawn += 1
    elif report.kept_keys.has(key, index) or key in report.unkept_keys:
        report.duplicates += 1
    else:
        return False
    return True


def _keeps(key: str, entry: dict[str, Any], keep_unknown: bool, report: MergeReport) -> bool:
    """Whether an entry calling unknown tools is written; if not, the caller gets it back."""
    if not keep_unknown:
        report.not_kept += 1
        report.unkept.append((key, entry))
        # the key's first line: the prompt is discarded, and a later line of it is a duplicate
        report.unkept_keys.add(key)
    return keep_unknown


def _labelled(line: bytes, entry: dict[str, Any], report: MergeReport) -> tuple[bytes, dict[str, Any]]:
    """The entry with `tool_not_offered` in its `metadata.discard_reasons` (as it was if there)."""
    metadata = entry.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    reasons = metadata.get("discard_reasons")
    reasons = list(reasons) if isinstance(reasons, list) else []
    if UNKNOWN_TOOL_REASON in reasons:
        return line, entry
    report.labelled += 1
    entry = {**entry, "metadata": {**metadata, "discard_reasons": [*reasons, UNKNOWN_TOOL_REASON]}}
    return encode_line(entry).rstrip(b"\n"), entry
