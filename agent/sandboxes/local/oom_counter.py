"""A slot's OOM counter, read through one descriptor kept for the slot's life.

Opening a cgroup file cost ~60 µs of CPU on the machines here (a Python file object over a
kernfs open), twice per command: before and after it, to tell whether the memory limit killed
something while it ran. A slot is reused prompt after prompt, so its counter's file is opened
once and read with `pread` from the start each time (the kernel renders it afresh).
"""

from __future__ import annotations

import os

from agent.sandboxes.host import memory_limits


class OomCounter:
    """The OOM kills of one memory cgroup so far; `close` when its slot's pool closes."""

    def __init__(self, path: str) -> None:
        self.path = path  # the group's `memory_limits.oom_file`
        self._fd: int | None = None

    def kills(self) -> int:
        """The kills counted so far; 0 when the file cannot be read (as `memory_limits.oom_kills`)."""
        for kept in (self._fd is not None, False):  # a kept descriptor that fails: opened again
            try:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                return memory_limits.count_oom_kills(os.pread(self._fd, 4096, 0).decode("ascii", "replace"))
            except OSError:
                self.close()
                if not kept:
                    break
        return 0

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
