"""Worker processes someone stopped (SIGSTOP, SIGTSTP): found in /proc and continued.

A command on the local backend runs as the worker's child and can `kill -STOP $PPID`; a
stopped worker answers nothing, not even its prompt's timeout, and the run would wait on it
forever. The parent looks at its workers once a tick and sends SIGCONT to a stopped one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger("agent.batch.scheduler")
STOPPED_STATES = ("T", "t")  # stopped by a signal, stopped by a tracer


def process_state(pid: int) -> str | None:
    """The one-letter state of `/proc/<pid>/stat`, None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text.rpartition(")")[2].split()
    return fields[0] if fields else None


class StoppedWatch:
    """Continues stopped workers, saying so once per worker."""

    def __init__(self) -> None:
        self._told: set[int] = set()

    def check(self, workers: dict[int, int | None]) -> list[int]:
        """SIGCONT every stopped worker of `workers` (worker id -> pid); returns their ids."""
        continued = []
        for worker, pid in workers.items():
            if pid is None or process_state(pid) not in STOPPED_STATES:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            continued.append(worker)
            if worker not in self._told:
                self._told.add(worker)
                log.warning(
                    "worker %d (pid %d) was stopped (SIGSTOP from one of its commands?): "
                    "continued it, so its prompts' --prompt_timeout can fire",
                    worker,
                    pid,
                )
        return continued
