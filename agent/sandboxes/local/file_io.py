"""File work of the local backend beneath a slot's descriptor (see host/safe_paths): the size
check of read_file and the atomic replace of write_file."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from contextlib import suppress

from agent.errors import SandboxPathError
from agent.sandboxes.host.safe_paths import escapes, open_dirs_beneath

MAX_READ_BYTES = 50 << 20  # read_file refuses larger files (the whole file is loaded)


def check_readable(info: os.stat_result, path: str) -> int:
    """The size of a file read_file may load; the error the model should see otherwise."""
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, "Not a regular file", path)
    if info.st_size > MAX_READ_BYTES:
        limit = f"{info.st_size} bytes, limit {MAX_READ_BYTES}"
        raise OSError(errno.EFBIG, f"File too large to load ({limit}); use the terminal", path)
    return info.st_size


def write_beneath(root_fd: int, relative: str, data: bytes, path: str) -> None:
    """Replace the file at `relative` beneath `root_fd` at once (a temporary file renamed over
    it), making its parents; an existing file keeps its mode (e.g. the executable bit)."""
    directory, name = os.path.split(relative)
    if name in ("", "."):
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    try:
        parent = open_dirs_beneath(root_fd, directory)
    except OSError as exc:
        if escapes(exc):
            raise SandboxPathError(f"{path}: leads outside the sandbox") from None
        raise OSError(exc.errno, exc.strerror, path) from None
    try:
        _replace(parent, name, data)
    finally:
        os.close(parent)


def _replace(parent: int, name: str, data: bytes) -> None:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        mode = stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else 0o644
    except FileNotFoundError:
        mode = 0o644
    temporary = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(fd, mode)
        # rename replaces the name itself (a symlink swapped in is replaced, not followed)
        os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=parent)
        raise
