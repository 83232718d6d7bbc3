"""The merged output's figures as an invocation's end counted them, kept in the run directory
for the next resume (issue 26: the end of a run is O(1) in its size for the user's wait).

A resume counts every line the earlier invocations wrote (`agent.store.earlier_lines`): at
200,000 prompts a resume with nothing left to run took 39 s, all of it counting. So the end of
a run whose merge wrote every recorded line as it is (no tombstone, duplicate, bad line or
label added) keeps its figures (`FIGURES_FILE`), with what they cover: each batch file's number
of recorded lines and a digest of their records (offset, length, CRC of the bytes, key, names).
The next invocation starts from those figures when every batch file they name still begins with
those same records (`recalled`), and counts only the lines after them. Whatever goes wrong after
(a counted line the merge leaves out, a line whose bytes changed) is caught as before: the end
counts everything again from the files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from agent.store.layout import batch_files
from agent.store.shard_index import ROW, ShardRecords

FIGURES_FILE = ".output_figures.json"
VERSION = 1


def figures_document(
    directory: Path,
    records: ShardRecords,
    valid_tools: Collection[str],
    figures: Mapping[str, Mapping[str, Any]],
    written: int,
) -> dict[str, Any] | None:
    """The document to keep: `figures`, the counts of the `written` lines of a merge, and what
    they cover; None unless those are every recorded line, each batch file recorded from its
    first line (a file that is not is read at every merge: no count of it holds later)."""
    covered: dict[str, list[Any]] = {}
    for path in batch_files(directory):
        shard = records.of(path)
        if shard is None or shard.base != 0:
            return None
        covered[path.name] = [shard.count, len(shard.keys), _digest(shard.rows, shard.keys, shard.count)]
        written -= shard.count
    if written:
        return None
    # each figure a value of its own: the file is written a value at a time (`document_pieces`)
    flat = {f"{group}/{name}": value for group, fields in figures.items() for name, value in fields.items()}
    return {"version": VERSION, "tools": sorted(valid_tools), "shards": covered, **flat}


def figures_of(document: Any, group: str) -> dict[str, Any]:
    """The figures of `group` (statistics, report) in a document `recalled` accepts."""
    return {key.split("/", 1)[1]: value for key, value in document.items() if key.startswith(f"{group}/")}


def recalled(document: Any, records: ShardRecords, valid_tools: Collection[str]) -> dict[str, int] | None:
    """How many rows of each batch file `document`'s figures counted; None when they do not
    describe these records (another version, tool registry, a file gone or rewritten)."""
    if not isinstance(document, dict) or document.get("version") != VERSION:
        return None
    if document.get("tools") != sorted(valid_tools):
        return None
    covered = document.get("shards")
    if not isinstance(covered, dict):
        return None
    counted: dict[str, int] = {}
    for name, cover in covered.items():
        shard = records.shards.get(name) if records.usable else None
        if shard is None or not isinstance(cover, list) or len(cover) != 3:
            return None
        rows, key_bytes, digest = cover
        if not isinstance(rows, int) or not 0 <= rows <= shard.count or shard.base != 0:
            return None
        if not isinstance(key_bytes, int) or _digest(shard.rows, shard.keys[:key_bytes], rows) != digest:
            return None
        counted[name] = rows
    return counted


def _digest(rows: bytearray, keys: bytearray, count: int) -> str:
    """Of the first `count` records: their rows (each names its key's length) and `keys`, the
    bytes of their keys."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(memoryview(rows)[: count * ROW.size])
    digest.update(keys)
    return digest.hexdigest()
