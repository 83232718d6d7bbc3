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

from agent.common.redaction import active
from agent.store.durable import repair_last_line

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
    by the run directory's rule (`agent.store.durable.repair_last_line`), with a logged warning."""
    name = filename or ("trajectory_samples.jsonl" if completed else "failed_trajectories.jsonl")
    path = Path(directory) / name
    entry = {
        "conversations": list(conversations),
        "timestamp": datetime.now().isoformat(),
        "model": model,
        "completed": completed,
    }
    line = active().redact_bytes((json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"))
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        note = repair_last_line(fh, path)
        if note:
            log.warning("%s/%s", path.parent, note)  # the note starts with the file name
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    return path
