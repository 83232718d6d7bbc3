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

from collections import Counter
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from agent.protocols.store import KeyBook
from agent.store.durable import atomic_write
from agent.store.jsonl import encode_line, parse_object
from agent.store.key_book import KeySet, index_hint
from agent.store.keys import KeyResolver, is_tombstone
from agent.store.layout import TRAJECTORIES_FILE, batch_files
from agent.store.merge_ahead import MergeAhead
from agent.store.merge_shard import Copied, copy_shard, copyable, in_index_order
from agent.store.shard_index import Line, Shard, ShardChanged, ShardRecords
from agent.store.token_merge import TokenMerge, open_sidecar
from agent.store.tool_counts import TOOL_ROWS, cut_name

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
) -> MergeReport:
    """Rewrite `output` atomically from every batch file: first line per prompt key, keys in
    `exclude` left out. Each kept line is copied as read (an entry calling unknown tools gains
    its label first, and is only kept with `keep_unknown`), newline-terminated. The lines in
    `records` (this process's appends) are not parsed, only checked (`ShardChanged`); with
    `counted`, the caller has counted them already: `on_entry` gets only the other lines, and a
    recorded line left out is counted in `counted_left_out` (the caller's count is then wrong).
    `ahead`: the first files copied during the run, continued from when it still holds
    (`agent.store.merge_ahead`), else dropped. The keys written are noted in a book `new_book`
    makes (`MergeReport.kept_keys`), or the ahead's when continued from it."""
    files = batch_files(directory)
    report, resolver = MergeReport(files=len(files), kept_keys=new_book()), KeyResolver()
    with ExitStack() as stack:
        sidecar = open_sidecar(stack, directory, output)
        usable = ahead is not None and counted and sidecar is None and ahead.holds(files, exclude)
        out, files = _output(stack, directory / output, files, report, ahead, usable)
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


def _output(
    stack: ExitStack,
    target: Path,
    files: list[Path],
    report: MergeReport,
    ahead: MergeAhead | None,
    usable: bool,
) -> tuple[BinaryIO, list[Path]]:
    """The merged file's writer (renamed over `target` as the stack closes, before the sidecar)
    and the files left to copy into it: continued from `ahead` when `usable`, else new."""
    if ahead is not None and usable:
        report.add(ahead.counts)
        report.kept_keys, report.ahead_files = ahead.kept, len(ahead.copies)
        return stack.enter_context(ahead.continued(target)), files[len(ahead.copies) :]
    if ahead is not None:
        ahead.drop()
    return stack.enter_context(atomic_write(target)), files


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
