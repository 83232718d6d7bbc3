"""Opening files beneath a directory so that nothing running at the same time can lead the
runner elsewhere: the sandbox's own processes may swap any directory of the workspace for a
symlink between a path check and the open, and the runner (root under bwrap) would follow it.

Every lookup is one `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)` from
a descriptor of the sandbox directory: the kernel resolves each component, symlinks included,
and fails with EXDEV as soon as one leaves it (or crosses a mount), whatever is renamed
meanwhile. Symlinks that stay beneath it are followed. Where openat2 is missing (Linux < 5.6,
or a seccomp filter that refuses it) the walk is done here, one component at a time with
O_NOFOLLOW, and any symlink is refused (ELOOP): stricter, never looser.

Directories are made one component at a time (`mkdir` at a parent descriptor, then opened with
O_NOFOLLOW) and owned by descriptor (`fchown`), never by a path that could be swapped.
"""

from __future__ import annotations

import ctypes
import errno
import os

SYS_OPENAT2 = 437  # one number on every architecture (allocated after the tables were unified)
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
EAGAIN_RETRIES = 32  # openat2 answers EAGAIN when a rename anywhere raced the lookup
DIR_PATH = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
ESCAPES = (errno.EXDEV, errno.ELOOP)  # what a lookup leading out of the directory fails with


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_state = {"openat2": True}  # False once the kernel (or a seccomp filter) has refused openat2


def escapes(error: OSError) -> bool:
    """Whether `error` means the path leads out of the directory (or through a symlink the
    fallback walk refuses), rather than that the file is missing or unreadable."""
    return error.errno in ESCAPES


def open_beneath(root_fd: int, path: str, flags: int, mode: int = 0) -> int:
    """A descriptor for `path` (relative to the directory `root_fd`) opened with `flags`.
    Raises OSError: EXDEV or ELOOP when the path leads out of the directory, else what the
    open failed with (ENOENT, ENOTDIR, ...)."""
    relative = path.lstrip("/") or "."
    if _state["openat2"]:
        try:
            return _openat2(root_fd, relative, flags | os.O_CLOEXEC, mode)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM):
                raise
            _state["openat2"] = False  # EPERM: a seccomp filter; the walk below needs no openat2
    return _walk(root_fd, relative, flags | os.O_CLOEXEC, mode)


def _openat2(root_fd: int, path: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode, RESOLVE)
    raw = os.fsencode(path)
    for _ in range(EAGAIN_RETRIES):
        fd = _libc.syscall(
            ctypes.c_long(SYS_OPENAT2),
            ctypes.c_long(root_fd),
            ctypes.c_char_p(raw),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            raise OSError(code, os.strerror(code), path)
    raise OSError(errno.EAGAIN, "the directory kept changing during the lookup", path)


def _walk(root_fd: int, path: str, flags: int, mode: int) -> int:
    """openat2's guarantee without it: every component opened at its parent with O_NOFOLLOW;
    a symlink anywhere (ELOOP, or ENOTDIR for a directory component) and `..` are refused."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise OSError(errno.EXDEV, "'..' is not followed", path)
    current = os.open(".", DIR_PATH, dir_fd=root_fd)
    try:
        for part in parts[:-1]:
            try:
                following = os.open(part, DIR_PATH | os.O_NOFOLLOW, dir_fd=current)
            except NotADirectoryError:  # a symlink opened with O_PATH|O_NOFOLLOW|O_DIRECTORY
                if os.path.islink(os.path.join(f"/proc/self/fd/{current}", part)):
                    raise OSError(errno.ELOOP, "a symlink is not followed", path) from None
                raise
            os.close(current)
            current = following
        return os.open(parts[-1] if parts else ".", flags | os.O_NOFOLLOW, mode, dir_fd=current)
    finally:
        os.close(current)


def open_dirs_beneath(root_fd: int, path: str, *, owner: int | None = None) -> int:
    """An O_PATH descriptor of the directory `path` beneath `root_fd`, making the missing
    components (mode 0755, owned by `owner` when given). Raises as `open_beneath`."""
    try:
        return open_beneath(root_fd, path, DIR_PATH)
    except FileNotFoundError:
        pass
    current = os.open(".", DIR_PATH, dir_fd=root_fd)
    try:
        for part in [part for part in path.split("/") if part not in ("", ".")]:
            try:
                following = open_beneath(current, part, DIR_PATH)
            except FileNotFoundError:
                following = _make_dir(current, part, owner)
            os.close(current)
            current = following
    except BaseException:
        os.close(current)
        raise
    return current


def _make_dir(parent_fd: int, name: str, owner: int | None) -> int:
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    except FileExistsError:
        return open_beneath(parent_fd, name, DIR_PATH)  # made meanwhile: whatever it is, beneath
    made = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        if owner is not None:
            os.fchown(made, owner, owner)  # the descriptor, never the name: the name may be swapped
        return os.open(".", DIR_PATH, dir_fd=made)
    finally:
        os.close(made)
