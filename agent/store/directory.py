"""The run directory `data/<run_name>/`: its lock, its append-only logs and its JSON files.

Only the parent process writes here. Appends go straight to the kernel (one `os.write` loop
per line, no user-space buffer), so a line is either wholly in the page cache or, if the
process is killed mid-write, a torn tail that `repair()` moves aside on the next start.
`sync()` fsyncs everything appended since the last call (group commit), and `write_json`
calls it first, so a checkpoint never claims a line that is not on disk.

Repair rule for the last line of each `*.jsonl`: a line that does not parse to a JSON object
is torn and its bytes are moved to `<file>.torn`; a complete JSON object that only lacks its
newline (killed between the object and the newline, or written by another tool) is kept and
the newline appended, since nothing of it was lost.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from agent.errors import RunLockedError
from agent.store.merge import (
    DISCARDED_FILE,
    FAILURES_FILE,
    TEMP_SUFFIX,
    TRAJECTORIES_FILE,
    MergeReport,
    RunIndex,
    atomic_write,
    fsync_directory,
    merge_run,
    parse_object,
    scan_run,
)

__all__ = ["MergeReport", "RunDirectory", "RunIndex"]

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
MAX_OPEN_FILES = 64
_CHUNK = 1 << 16


class RunDirectory:
    """One run's directory. Call `lock()` then `repair()` before the first append."""

    def __init__(self, path: Path, max_open_files: int = MAX_OPEN_FILES) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fd: int | None = None
        self._fds: OrderedDict[Path, int] = OrderedDict()  # LRU of append descriptors
        self._dirty: set[Path] = set()  # appended to since the last sync
        self._new_names = False  # files created since the last sync
        self._max_open = max(1, max_open_files)

    # ------------------------------------------------------------ lifecycle

    def lock(self) -> None:
        """Take the run's exclusive lock; another holder → RunLockedError naming its pid.

        flock belongs to the open file description, so the kernel drops it when the holder
        dies, even by SIGKILL. Children made by fork() share it until they exit: orphaned
        forked workers keep the directory locked, which is the safe side."""
        if self._lock_fd is not None:
            return
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunLockedError(
                f"{self.path} is in use by another runner (pid {holder}); "
                "wait for it or pick another --run_name"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._lock_fd = fd

    def close(self) -> None:
        """Sync and close the logs, then release the lock. Safe to call twice."""
        try:
            self.sync()
        finally:
            self._close_fds()
            if self._lock_fd is not None:
                fd, self._lock_fd = self._lock_fd, None
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------ reading

    def has_results(self) -> bool:
        names = [p.name for p in self.path.glob("batch_*.jsonl")] + [DISCARDED_FILE, FAILURES_FILE]
        return any(_size(self.path / name) > 0 for name in names)

    def scan(self) -> RunIndex:
        return scan_run(self.path)

    def read_json(self, name: str) -> Any | None:
        """The parsed file, or None when it is missing or corrupt (corrupt is logged)."""
        try:
            return json.loads((self.path / _plain(name)).read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            logger.warning("%s: ignoring a corrupt file (%s)", self.path / name, exc)
            return None

    # ------------------------------------------------------------ writing

    def append_result(self, batch_num: int, entry: Mapping[str, Any] | bytes) -> None:
        """Append a result: a mapping, or a line already made by `encode_line` (workers encode
        their entries, so the parent neither unpickles nor re-encodes them)."""
        self._append(self.path / f"batch_{int(batch_num)}.jsonl", entry)

    def append_discard(self, record: Mapping[str, Any]) -> None:
        self._append(self.path / DISCARDED_FILE, record)

    def append_failure(self, record: Mapping[str, Any]) -> None:
        self._append(self.path / FAILURES_FILE, record)

    def sync(self) -> None:
        """fsync every file appended to since the last sync, and the directory if it gained names."""
        for path in sorted(self._dirty):
            fd = self._fds.get(path)
            if fd is not None:
                os.fsync(fd)
            self._dirty.discard(path)
        if self._new_names:
            fsync_directory(self.path)
            self._new_names = False

    def write_json(self, name: str, data: Any) -> None:
        """Replace `name` atomically (after syncing the logs it may refer to)."""
        text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        self.sync()
        with atomic_write(self.path / _plain(name)) as handle:
            handle.write(text.encode("utf-8"))

    def merge(
        self,
        valid_tools: Collection[str],
        on_entry: Callable[[dict[str, Any]], None] | None = None,
        output: str = TRAJECTORIES_FILE,
    ) -> MergeReport:
        self.sync()
        return merge_run(self.path, valid_tools, on_entry, _plain(output))

    def _append(self, path: Path, record: Mapping[str, Any] | bytes) -> None:
        # Serialise first: a record that cannot be encoded leaves no partial line behind.
        data = encode_line(record) if not isinstance(record, bytes) else _one_line(record)
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

    def _fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        while len(self._fds) >= self._max_open:
            old_path, old_fd = self._fds.popitem(last=False)
            if old_path in self._dirty:
                os.fsync(old_fd)  # it leaves the LRU: sync now, sync() can no longer reach it
                self._dirty.discard(old_path)
            os.close(old_fd)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            fd = os.open(path, flags | os.O_CREAT, 0o644)
            self._new_names = True
        self._fds[path] = fd
        return fd

    def _close_fds(self) -> None:
        while self._fds:
            _path, fd = self._fds.popitem()
            os.close(fd)

    # ------------------------------------------------------------ repair

    def repair(self) -> list[str]:
        """Make every `*.jsonl` end on a whole line (see the module docstring) and remove temp
        files a crash left behind. Returns one note per change. Needs the lock: the temp
        files of a live runner must not be removed."""
        if self._lock_fd is None:
            raise RuntimeError("repair() needs the run lock: call lock() first")
        self.sync()
        self._close_fds()
        notes = []
        for temp in sorted(self.path.glob(f".*{TEMP_SUFFIX}")):
            temp.unlink(missing_ok=True)
            notes.append(f"{temp.name}: removed a temp file left by an interrupted write")
        for path in sorted(self.path.glob("*.jsonl")):
            note = _repair_tail(path)
            if note:
                notes.append(note)
        return notes


def encode_line(record: Mapping[str, Any]) -> bytes:
    """One JSONL line (UTF-8, newline-terminated). Raises ValueError (NaN: not JSON, and strict
    readers such as pyarrow reject it), TypeError or UnicodeEncodeError for what is not JSON."""
    return (json.dumps(dict(record), ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def _one_line(line: bytes) -> bytes:
    if not (line.startswith(b"{") and line.endswith(b"}\n")) or line.count(b"\n") != 1:
        raise ValueError("a pre-encoded record must be one newline-terminated JSON object line")
    return line


def _plain(name: str) -> str:
    """A bare file name inside the run directory (never a path that could leave it)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")
    return name


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.EIO, "write returned 0")
        view = view[written:]


def _line_start(handle: BinaryIO, end: int) -> int:
    """Offset of the first byte of the line that ends at `end` (exclusive)."""
    pos = end
    while pos > 0:
        step = min(_CHUNK, pos)
        pos -= step
        handle.seek(pos)
        newline = handle.read(step).rfind(b"\n")
        if newline >= 0:
            return pos + newline + 1
    return 0


def _repair_tail(path: Path) -> str | None:
    with path.open("r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return None
        handle.seek(size - 1)
        terminated = handle.read(1) == b"\n"
        end = size - 1 if terminated else size
        start = _line_start(handle, end)
        handle.seek(start)
        line = handle.read(end - start)
        if terminated and (not line.strip() or parse_object(line) is not None):
            return None
        if parse_object(line) is not None:
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n")
            handle.flush()
            os.fsync(handle.fileno())
            return f"{path.name}: added the missing newline after a complete last line"
        _keep_torn(path.with_name(path.name + ".torn"), line + (b"\n" if terminated else b""))
        handle.truncate(start)
        handle.flush()
        os.fsync(handle.fileno())
    return f"{path.name}: moved a torn last line ({size - start} bytes) to {path.name}.torn"


def _keep_torn(path: Path, data: bytes) -> None:
    """Append the torn bytes (newline-terminated) to the side file, durably, before the
    original is truncated: the bytes are never in neither place."""
    created = not path.exists()
    with path.open("ab") as handle:
        handle.write(data if data.endswith(b"\n") else data + b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    if created:
        fsync_directory(path.parent)
