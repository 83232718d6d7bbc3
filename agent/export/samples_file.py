"""The single-query CLI's trajectory files (`trajectory_samples.jsonl`,
`failed_trajectories.jsonl`): one locked, fsynced append per conversation."""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)


def save_trajectory(
    conversations: Sequence[Mapping[str, str]],
    model: str,
    completed: bool,
    filename: str | None = None,
    directory: str | os.PathLike[str] = ".",
) -> Path:
    """Append one `{"conversations", "timestamp", "model", "completed"}` line; returns the file.

    Default file: `trajectory_samples.jsonl` when completed, else `failed_trajectories.jsonl`.
    The line is flushed and fsynced before returning; an exclusive lock keeps concurrent
    writers from interleaving. A torn last line (a writer killed mid-line) is repaired first,
    see `_repair_torn_tail`."""
    name = filename or ("trajectory_samples.jsonl" if completed else "failed_trajectories.jsonl")
    path = Path(directory) / name
    entry = {
        "conversations": list(conversations),
        "timestamp": datetime.now().isoformat(),
        "model": model,
        "completed": completed,
    }
    line = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        _repair_torn_tail(fh, path)
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    return path


def _repair_torn_tail(fh: BinaryIO, path: Path) -> None:
    """Make the file end with a newline before appending.

    A tail without a newline that still parses as JSON lost only its newline: it is kept and
    the newline added. Otherwise it is a torn, unparseable fragment: gluing our line to it
    would corrupt both, so it is moved to `<file>.torn` (appended, fsynced) and truncated away,
    with a logged warning."""
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return
    fh.seek(size - 1)
    if fh.read(1) == b"\n":
        return
    start = _last_line_start(fh, size)
    fh.seek(start)
    tail = fh.read()
    try:
        json.loads(tail)
    except ValueError:
        torn = path.with_name(path.name + ".torn")
        with open(torn, "ab") as aside:
            aside.write(tail + b"\n")
            aside.flush()
            os.fsync(aside.fileno())
        os.ftruncate(fh.fileno(), start)
        log.warning("%s: torn last line (%d bytes) moved to %s", path, len(tail), torn)
        return
    fh.write(b"\n")


def _last_line_start(fh: BinaryIO, size: int, block: int = 1 << 16) -> int:
    """Offset just after the last newline (0 when there is none), scanning back by blocks."""
    end = size
    while end > 0:
        lo = max(0, end - block)
        fh.seek(lo)
        newline = fh.read(end - lo).rfind(b"\n")
        if newline >= 0:
            return lo + newline + 1
        end = lo
    return 0
