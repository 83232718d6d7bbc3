"""Reading a run directory's JSONL files: which prompts are done, and the merged output.

Both readers stream every file line by line and never stop on a bad line: a line that is not
UTF-8, not JSON, or not an object is counted as invalid and skipped (the reference aborted
its whole merge on a non-object line).

A result line's key is `metadata.prompt_key`. Lines written by other tools lack it; their key
is rebuilt from the first `human` turn of `conversations`, numbering repeated texts in the
order met (batch files in numeric order, lines in file order), exactly as the dataset numbers
repeated prompts. A result line with a truthy `discarded` and no `conversations` is a
tombstone (written by later versions of the reference): it marks its prompt discarded and is
never merged. Discard and failure records carry their key in `prompt_key`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from agent.batch.dataset import prompt_key

DISCARDED_FILE = "discarded.jsonl"
FAILURES_FILE = "failures.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
TEMP_SUFFIX = ".tmp"
_BATCH_NAME = re.compile(r"batch_(\d+)\.jsonl")


@dataclass
class RunIndex:
    done: set[str] = field(default_factory=set)  # keys with a result line in batch files
    discarded: set[str] = field(default_factory=set)  # keys in discarded.jsonl (or tombstones)
    failures: dict[str, int] = field(default_factory=dict)  # key -> attempts, not done/discarded
    results: int = 0  # result lines with a key (duplicates included)
    invalid_lines: int = 0


@dataclass
class MergeReport:
    files: int = 0
    written: int = 0
    duplicates: int = 0
    corrupted: int = 0
    invalid_lines: int = 0
    unknown_tools: dict[str, int] = field(default_factory=dict)  # tool name -> entries calling it
    tombstones: int = 0


def batch_files(directory: Path) -> list[Path]:
    """Every `batch_*.jsonl`, numbered ones in numeric order (batch_2 before batch_10),
    then any others by name."""

    def order(path: Path) -> tuple[int, int, str]:
        match = _BATCH_NAME.fullmatch(path.name)
        return (0, int(match.group(1)), "") if match else (1, 0, path.name)

    return sorted((p for p in directory.glob("batch_*.jsonl") if p.is_file()), key=order)


def read_lines(path: Path) -> Iterator[tuple[bytes, dict[str, Any] | None]]:
    """(line without its terminator, parsed object or None when invalid) for each non-blank
    line; a missing file has no lines."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        for raw in handle:
            line = raw.rstrip(b"\r\n")
            if line.strip():
                yield line, parse_object(line)


def parse_object(line: bytes) -> dict[str, Any] | None:
    """The JSON object on this line, or None when it is anything else."""
    try:
        value = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class KeyResolver:
    """Prompt keys of result lines, numbering fallback texts in the order they are met."""

    def __init__(self) -> None:
        self._copies: Counter[str] = Counter()

    def result_key(self, entry: dict[str, Any]) -> str | None:
        metadata = entry.get("metadata")
        if isinstance(metadata, dict):
            key = metadata.get("prompt_key")
            if isinstance(key, str) and key:
                return key
        if is_tombstone(entry):
            return self._from_text(entry.get("prompt"))
        return self._from_text(_first_human_text(entry.get("conversations")))

    def _from_text(self, text: Any) -> str | None:
        if not isinstance(text, str) or not text.strip():
            return None
        digest = hashlib.sha256(text.strip().encode("utf-8")).hexdigest()
        occurrence = self._copies[digest]
        self._copies[digest] += 1
        return prompt_key(text, occurrence)


def _first_human_text(conversations: Any) -> Any:
    if isinstance(conversations, list):
        for turn in conversations:
            if isinstance(turn, dict) and turn.get("from") == "human":
                return turn.get("value")
    return None


def is_tombstone(entry: dict[str, Any]) -> bool:
    return bool(entry.get("discarded")) and "conversations" not in entry


def record_key(record: dict[str, Any] | None) -> str | None:
    key = record.get("prompt_key") if record is not None else None
    return key if isinstance(key, str) and key else None


def scan_run(directory: Path) -> RunIndex:
    """Which prompts already have a result, a discard record or failure records."""
    index = RunIndex()
    resolver = KeyResolver()
    for path in batch_files(directory):
        for _line, entry in read_lines(path):
            key = resolver.result_key(entry) if entry is not None else None
            if entry is None or key is None:
                index.invalid_lines += 1
            elif is_tombstone(entry):
                index.discarded.add(key)
            else:
                index.results += 1
                index.done.add(key)
    for _line, record in read_lines(directory / DISCARDED_FILE):
        key = record_key(record)
        if key is None:
            index.invalid_lines += 1
        else:
            index.discarded.add(key)
    attempts: Counter[str] = Counter()
    for _line, record in read_lines(directory / FAILURES_FILE):
        key = record_key(record)
        if key is None:
            index.invalid_lines += 1
        else:
            attempts[key] += 1
    index.failures = {
        key: n for key, n in attempts.items() if key not in index.done and key not in index.discarded
    }
    return index


def fsync_directory(directory: Path) -> None:
    """Make renames and new names in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_write(path: Path) -> Iterator[BinaryIO]:
    """Write `path` all or nothing: a temp file in the same directory, fsynced, then renamed
    over it. If the block raises, the old file stays as it was and the temp file is removed."""
    temp = path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")
    try:
        with temp.open("wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


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
