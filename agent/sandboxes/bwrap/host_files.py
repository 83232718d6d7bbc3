"""The bwrap backend's fast path for files: a path in a writable place (`/workspace`, `/tmp`,
the cwd) is read or written on the host, in the host directory behind that place, without
starting a sandbox.

The runner may be root and the sandbox's processes own the directory and run while we work,
so every lookup goes through `safe_paths` beneath the place's directory: a directory swapped
for a symlink mid-call leads nowhere else, and what is made is owned by descriptor. A path
that leads out of its place (a symlink to `/etc`, or from `/workspace` to `/tmp`) is not an
error here: the caller then lets the sandbox itself do it, with the sandbox's view and rights.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from agent.sandboxes import shell_scripts
from agent.sandboxes.host.safe_paths import DIR_PATH, escapes, open_beneath, open_dirs_beneath


def read_beneath(place: str, relative: str, target: str) -> bytes | None:
    """The file at `relative` under the host directory `place`; None when the path leads out
    of it. `target` (the sandbox's path) names the file in errors."""
    root = os.open(place, DIR_PATH | os.O_NOFOLLOW)
    try:
        fd = open_beneath(root, relative, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block us
    except OSError as exc:
        if escapes(exc):
            return None
        raise OSError(exc.errno, exc.strerror, target) from None
    finally:
        os.close(root)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", target)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", target)
        return shell_scripts.check_read_size(target, handle.read(shell_scripts.MAX_READ + 1))


def write_beneath(place: str, relative: str, data: bytes, *, target: str, owner: int | None) -> bool:
    """Write `data` at `relative` under `place`, making its parent directories (owned by
    `owner`); an existing file keeps its mode. False (nothing written) when the path leads out."""
    directory, name = posixpath.split(relative.strip("/"))
    if not name:
        raise IsADirectoryError(errno.EISDIR, "Is a directory", target)
    root = os.open(place, DIR_PATH | os.O_NOFOLLOW)
    try:
        parent = open_dirs_beneath(root, directory, owner=owner)
        try:
            fd = open_beneath(parent, name, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644)
        finally:
            os.close(parent)
    except OSError as exc:
        if escapes(exc):
            return False
        raise OSError(exc.errno, exc.strerror, target) from None
    finally:
        os.close(root)
    with os.fdopen(fd, "wb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", target)
        os.ftruncate(fd, 0)  # only now: O_TRUNC would act before the check above
        if owner is not None:
            os.fchown(fd, owner, owner)  # the sandbox's root owns what it sees
        handle.write(data)
    return True
