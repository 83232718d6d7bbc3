"""The merged output's figures as an invocation's end counted them, kept in the run directory
for the next resume (issue 26: the end of a run is O(1) in its size for the user's wait).

A resume counts every line the earlier invocations wrote (`agent.store.earlier_lines`): at
200,000 prompts a resume with nothing left to run took 36-41 s, nearly all of it counting. So
the end of a run whose merge wrote every recorded line as it is (no tombstone, duplicate, bad
line or label added) keeps its figures (`FIGURES_FILE`), with what they cover: each batch
file's number of recorded lines and a digest of their records (offset, length, CRC of the
bytes, key, names), and a digest of the figures themselves. Any other end removes the file.
The next invocation starts from the figures when they are intact and every batch file they name
still begins with those same records, with no tombstone or unknown tool after them (`recalled`),
and counts only the lines after them. Whatever goes wrong after (a counted line the merge
leaves out, a line whose bytes changed) is caught as before: the end counts everything again
from the files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

from agent.store.earlier_lines import earlier_rows
from agent.store.layout import batch_files
from agent.store.merge_shard import plain_rows
from agent.store.shard_index import ROW, ShardRecords

FIGURES_FILE = ".output_figures.json"
VERSION = 1


def figures_head(
    directory: Path, records: ShardRecords, valid_tools: Collection[str], written: int
) -> dict[str, Any] | None:
    """The head of the document to keep with the figures of a merge's `written` lines, what they
    cover; None unless those are every recorded line, each batch file recorded from its first
    line (a file that is not is read at every merge: no count of it holds later)."""
    covered: dict[str, list[Any]] = {}
    for path in batch_files(directory):
        shard = records.of(path)
        if shard is None or shard.base != 0:
            return None
        covered[path.name] = [shard.count, len(shard.keys), _digest(shard.rows, shard.keys, shard.count)]
        written -= shard.count
    return None if written else {"version": VERSION, "tools": sorted(valid_tools), "shards": covered}


def figures_pieces(head: Mapping[str, Any], figures: Mapping[str, Mapping[str, Any]]) -> Iterator[bytes]:
    """The document, `head` then each figure (a value of its own, "group/name", encoded as it is
    written: a million entries' figures are never whole in memory as text), then `check`."""
    check = hashlib.blake2b(digest_size=16)
    yield json.dumps(head, ensure_ascii=False)[:-1].encode()
    for group, fields in figures.items():
        for name, value in fields.items():
            key, encoded = f"{group}/{name}", _encoded(value)
            _add_check(check, key, encoded)
            yield f",{json.dumps(key)}:{encoded}".encode()
    yield f',"check":"{check.hexdigest()}"}}\n'.encode()


def figures_of(document: Any, group: str) -> dict[str, Any]:
    """The figures of `group` (statistics, report) in a document `recalled` accepts."""
    return {key.split("/", 1)[1]: value for key, value in document.items() if key.startswith(f"{group}/")}


def forget(directory: Path) -> None:
    """Remove the kept figures (an end that kept none: those of an earlier end no longer hold)."""
    (directory / FIGURES_FILE).unlink(missing_ok=True)


def recalled(document: Any, records: ShardRecords, valid_tools: Collection[str]) -> dict[str, int] | None:
    """How many rows of each batch file `document`'s figures counted; None when they do not
    describe these records (another version, tool registry, a file gone or rewritten), or count a
    line this process appended (counted as it was appended)."""
    if not isinstance(document, dict) or document.get("version") != VERSION:
        return None
    if document.get("tools") != sorted(valid_tools):
        return None
    if document.get("check") != _check({key: value for key, value in document.items() if "/" in key}):
        return None  # damaged, or edited by hand
    covered = document.get("shards")
    if not isinstance(covered, dict):
        return None
    counted: dict[str, int] = {}
    for name, cover in covered.items():
        shard = records.shards.get(name) if records.usable else None
        if shard is None or not isinstance(cover, list) or len(cover) != 3:
            return None
        rows, key_bytes, digest = cover
        if not isinstance(rows, int) or not 0 <= rows <= earlier_rows(shard) or shard.base != 0:
            return None
        if not isinstance(key_bytes, int) or _digest(shard.rows, shard.keys[:key_bytes], rows) != digest:
            return None
        if not plain_rows(shard, rows, valid_tools):  # a tombstone may withdraw a counted line
            return None
        counted[name] = rows
    return counted


def _check(figures: Mapping[str, Any]) -> str:
    """The digest `figures_pieces` writes of the figures, from the figures read back."""
    check = hashlib.blake2b(digest_size=16)
    for key, value in figures.items():
        _add_check(check, key, _encoded(value))
    return check.hexdigest()


def _encoded(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _add_check(check: Any, key: str, encoded: str) -> None:
    check.update(key.encode())
    check.update(b"\0")
    check.update(encoded.encode())


def _digest(rows: bytearray, keys: bytearray, count: int) -> str:
    """Of the first `count` records: their rows (each names its key's length) and `keys`, the
    bytes of their keys."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(memoryview(rows)[: count * ROW.size])
    digest.update(keys)
    return digest.hexdigest()
