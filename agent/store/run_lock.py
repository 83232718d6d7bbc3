"""A run directory's lock (`.lock`, flock): one runner writes a run directory at a time, and
nothing reads it whole (an export of an existing run) while one does.

flock belongs to the open file description, so the kernel drops it when the holder dies, even
by SIGKILL. Children made by fork() share it until they exit: orphaned forked workers keep the
directory locked, which is the safe side. The writer's pid is in the file, to name it."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agent.errors import RunLockedError
from agent.store.layout import LOCK_FILE


def take(path: Path, *, shared: bool = False) -> int:
    """The lock's descriptor, held exclusively (a writer) or `shared` (a reader); another
    writer, or a reader when a writer asks → RunLockedError naming the writer's pid."""
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise RunLockedError(
            f"{path} is in use by another runner (pid {holder}); wait for it or pick another --run_name"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    if not shared:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


def release(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Hold `path` for reading it whole: refused while a runner writes it (exit 3), and a
    runner that starts meanwhile is refused in turn."""
    fd = take(path, shared=True)
    try:
        yield
    finally:
        release(fd)


def check_free(path: Path) -> None:
    """RunLockedError when a runner writes `path` now; nothing held after."""
    release(take(path, shared=True))
