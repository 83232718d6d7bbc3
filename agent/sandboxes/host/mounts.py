"""Mounts under a sandbox's directory, detached before the directory is emptied or deleted.

A command running as root can mount inside its workspace (`mount -t tmpfs tmpfs x`,
`mount --bind / x`): deleting the directory would then fail (EBUSY) or, through a bind
mount, delete what the mount shows. So every mount under a sandbox directory is detached
first (`umount2(MNT_DETACH)`, what `umount -l` does), and a directory whose mounts cannot be
detached is never deleted nor reused.

The mount table is read again only when it changed: /proc/self/mountinfo is pollable, and
poll() reports POLLPRI once after each change of the mount namespace (proc(5)), so a sandbox
close costs one poll(2) rather than a read of every mount.
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import threading
from functools import cache

from agent.errors import SandboxError

MNT_DETACH = 2
MS_NOSUID, MS_NODEV = 2, 4
UMOUNT_NOFOLLOW = 8
ROUNDS = 8  # mounts stacked on one point come off one per umount2


class _MountTable:
    """This process's mount points, re-read only after the kernel said the table changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = 0
        self._fd = -1
        self._poll = select.poll()
        self._points: tuple[str, ...] = ()

    def points(self, *, fresh: bool = False) -> tuple[str, ...]:
        with self._lock:
            if fresh or self._changed():
                self._points = _read_points()
            return self._points

    def _changed(self) -> bool:
        if self._pid != os.getpid():  # first use, or a forked child holding its parent's file
            self._pid = os.getpid()
            self._poll = select.poll()
            self._fd = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)
            self._poll.register(self._fd, select.POLLPRI | select.POLLERR)
            return True
        return bool(self._poll.poll(0))  # each poll reports a change once


_TABLE = _MountTable()


def mounts_under(path: str, *, fresh: bool = False) -> list[str]:
    """Mount points at or below `path` (a real path), deepest first."""
    prefix = path.rstrip("/") + "/"
    found = [point for point in _TABLE.points(fresh=fresh) if point == path or point.startswith(prefix)]
    return sorted(found, key=len, reverse=True)


def detach_under(path: str) -> list[str]:
    """Detach every mount at or below `path`; returns the mount points detached. SandboxError
    (naming one) when a mount cannot be detached: then nothing under `path` may be deleted."""
    detached: list[str] = []
    found = mounts_under(path)
    for _ in range(ROUNDS):
        if not found:
            return detached
        for point in found:
            if _umount(point):
                detached.append(point)
        found = mounts_under(path, fresh=True)
    raise SandboxError(f"cannot unmount {found[0]} (mounted inside a sandbox): its sandbox is left in place")


def mount_tmpfs(path: str, megabytes: int) -> None:
    """A tmpfs of `megabytes` on `path` (root only): what is written past it fails with ENOSPC."""
    options = f"size={megabytes}m,mode=0755".encode()
    if _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        code = ctypes.get_errno()
        raise SandboxError(f"cannot mount a {megabytes} MB tmpfs on {path}: {os.strerror(code)}")


def _umount(point: str) -> bool:
    if _libc().umount2(os.fsencode(point), MNT_DETACH | UMOUNT_NOFOLLOW) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOENT):  # went with a mount above it, detached just before
        return False
    raise SandboxError(f"cannot unmount {point} (mounted inside a sandbox): {os.strerror(code)}")


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _read_points() -> tuple[str, ...]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
        return tuple(unescape(line.split(" ", 5)[4]) for line in handle if line.count(" ") >= 5)


def unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are written as octal escapes."""
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field
