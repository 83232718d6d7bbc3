"""Appends to a run directory's logs, and the group commit that makes them durable.

Appends go straight to the kernel (one `os.write` loop per line, no user-space buffer), so a
line is either wholly in the page cache or, if the process is killed mid-write, a torn tail
that the next start repairs (`agent.store.durable`). `sync()` fsyncs every file appended to
since the last call, and the directory when files were created. Token sidecars
(`tokens_*.jsonl`) are synced first: a result line is appended after its sidecar line, so a
result on disk always has its tokens on disk too, power lost between two fsyncs included.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections import OrderedDict
from fnmatch import fnmatchcase
from pathlib import Path

from agent.store.durable import fsync_directory
from agent.store.layout import TOKENS_GLOB

MAX_OPEN_FILES = 64


class Appender:
    """Whole-line appends to the files of one directory, through an LRU of open descriptors."""

    def __init__(self, directory: Path, max_open_files: int = MAX_OPEN_FILES) -> None:
        self._directory = directory
        self._fds: OrderedDict[Path, int] = OrderedDict()  # LRU of append descriptors
        self._dirty: set[Path] = set()  # appended to since the last sync
        self._new_names = False  # files created since the last sync
        self._max_open = max(1, max_open_files)

    def append(self, path: Path, data: bytes) -> int:
        """Append `data` (one or more whole lines) to `path`, or nothing of it on error; the
        offset it starts at."""
        fd = self._fd(path)
        start = os.fstat(fd).st_size
        try:
            _write_all(fd, data)
        except OSError:
            # e.g. ENOSPC half-way: take the partial line back so the next append starts clean.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
        self._dirty.add(path)
        return start

    def sync(self) -> None:
        """fsync every file appended to since the last sync (sidecars first), and the directory
        if it gained names."""
        self._sync_sidecars()
        if self._new_names:
            fsync_directory(self._directory)
            self._new_names = False
        self._sync_paths(sorted(self._dirty))

    def _sync_sidecars(self) -> None:
        self._sync_paths(sorted(p for p in self._dirty if _sidecar(p)))

    def _sync_paths(self, paths: list[Path]) -> None:
        for path in paths:
            fd = self._fds.get(path)
            if fd is not None:
                os.fsync(fd)
            self._dirty.discard(path)

    def close(self) -> None:
        """Close every descriptor (without syncing: call `sync()` first)."""
        while self._fds:
            _path, fd = self._fds.popitem()
            os.close(fd)

    def _fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        while len(self._fds) >= self._max_open:
            self._close_oldest()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            fd = os.open(path, flags | os.O_CREAT, 0o644)
            self._new_names = True
        self._fds[path] = fd
        return fd

    def _close_oldest(self) -> None:
        old_path, old_fd = self._fds.popitem(last=False)
        if old_path in self._dirty:
            if not _sidecar(old_path):
                self._sync_sidecars()  # a result synced before its tokens line: never
            os.fsync(old_fd)  # it leaves the LRU: sync now, sync() can no longer reach it
            self._dirty.discard(old_path)
        os.close(old_fd)


def _sidecar(path: Path) -> bool:
    return fnmatchcase(path.name, TOKENS_GLOB)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.EIO, "write returned 0")
        view = view[written:]
