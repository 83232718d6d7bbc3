"""The names of a run directory's files, and the order its batch files are read in."""

from __future__ import annotations

import re
from pathlib import Path

LOCK_FILE = ".lock"
DISCARDED_FILE = "discarded.jsonl"
FAILURES_FILE = "failures.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
STATISTICS_FILE = "statistics.json"
BATCH_GLOB = "batch_*.jsonl"
# --capture_tokens: each batch file's token sidecar (one TokenRecord line per entry, bound to it
# by metadata.tokens.id), and the merged one, line for line beside trajectories.jsonl.
TOKENS_GLOB = "tokens_*.jsonl"
TOKENS_FILE = "tokens.jsonl"
_BATCH_NAME = re.compile(r"batch_(\d+)\.jsonl")


def batch_file_name(batch_num: int) -> str:
    return f"batch_{int(batch_num)}.jsonl"


def tokens_file_name(batch_num: int) -> str:
    return f"tokens_{int(batch_num)}.jsonl"


def batch_files(directory: Path) -> list[Path]:
    """Every `batch_*.jsonl`, numbered ones in numeric order (batch_2 before batch_10),
    then any others by name."""

    def order(path: Path) -> tuple[int, int, str]:
        match = _BATCH_NAME.fullmatch(path.name)
        return (0, int(match.group(1)), "") if match else (1, 0, path.name)

    return sorted((p for p in directory.glob(BATCH_GLOB) if p.is_file()), key=order)


# size, inode, modification and change times (ns): an edit in place moves the change time on even
# when it puts the size and modification time back (utime sets the change time too)
Stamp = tuple[int, int, int, int]


def file_stamp(path: Path) -> Stamp | None:
    """The file's `Stamp`; None when it does not exist."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return status.st_size, status.st_ino, status.st_mtime_ns, status.st_ctime_ns


def file_size(path: Path) -> int:
    """The file's size; 0 when it does not exist (a log nothing was written to yet)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
