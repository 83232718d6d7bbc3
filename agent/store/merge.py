"""The merged output of a run: `trajectories.jsonl` rewritten from every batch file.

First line per prompt key wins; entries calling tools the registry does not know are dropped;
tombstones are never merged; a line that is not UTF-8, not JSON, not an object or has no key
is counted and skipped (the reference aborted its whole merge on a non-object line). Kept lines
are copied byte for byte as read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.store.durable import atomic_write
from agent.store.jsonl import read_lines
from agent.store.keys import KeyResolver, is_tombstone
from agent.store.layout import TRAJECTORIES_FILE, batch_files


@dataclass
class MergeReport:
    files: int = 0
    written: int = 0
    duplicates: int = 0
    corrupted: int = 0
    invalid_lines: int = 0
    unknown_tools: dict[str, int] = field(default_factory=dict)  # tool name -> entries calling it
    tombstones: int = 0


def unknown_tools(entry: dict[str, Any], valid_tools: Collection[str]) -> list[str]:
    """Tool names in the entry's `tool_stats` that the registry does not know."""
    stats = entry.get("tool_stats")
    return [name for name in stats if name not in valid_tools] if isinstance(stats, dict) else []


def merge_run(
    directory: Path,
    valid_tools: Collection[str],
    on_entry: Callable[[dict[str, Any]], None] | None = None,
    output: str = TRAJECTORIES_FILE,
) -> MergeReport:
    """Rewrite `output` atomically from every batch file: first line per prompt key, entries
    calling unknown tools dropped. Each kept line is copied as read, newline-terminated."""
    report = MergeReport()
    resolver = KeyResolver()
    seen: set[str] = set()
    unknown: Counter[str] = Counter()
    files = batch_files(directory)
    report.files = len(files)
    with atomic_write(directory / output) as out:
        for path in files:
            for line, entry in read_lines(path):
                key = resolver.result_key(entry) if entry is not None else None
                if entry is None or key is None:
                    report.invalid_lines += 1
                elif is_tombstone(entry):
                    report.tombstones += 1
                elif key in seen:
                    report.duplicates += 1
                elif bad := unknown_tools(entry, valid_tools):
                    seen.add(key)
                    report.corrupted += 1
                    unknown.update(bad)
                else:
                    seen.add(key)
                    out.write(line + b"\n")
                    report.written += 1
                    if on_entry is not None:
                        on_entry(entry)
    report.unknown_tools = dict(unknown)
    return report
