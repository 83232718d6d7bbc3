"""Per-sandbox host directories (bwrap): made with an owner record beside the sandbox's own
places, removed even when the sandbox took permissions away, reaped (with any process still
using them) when their owner died.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress

from agent.sandboxes.host.mounts import detach_under, mount_tmpfs
from agent.sandboxes.host.owner import current_owner, owner_is_dead

OWNER_FILE = "owner.json"  # beside workspace/ and tmp/, out of the sandbox's sight


def make_sandbox_dir(prefix: str, root: str | None, disk_mb: int | None = None) -> str:
    """A fresh directory under `root`; with `disk_mb`, a tmpfs of that size (root only), so
    that what the sandbox writes past it fails with ENOSPC and never fills the host's disk."""
    directory = tempfile.mkdtemp(prefix=prefix, dir=root)
    try:
        if disk_mb is not None:
            mount_tmpfs(directory, disk_mb)
        with open(os.path.join(directory, OWNER_FILE), "w", encoding="utf-8") as handle:
            json.dump(current_owner(), handle)
    except BaseException:
        remove_tree(directory)
        raise
    return directory


def remove_tree(path: str) -> None:
    """rmtree that first restores permissions a command may have taken away (chmod 000 on a
    directory, or a read-only one): needed by any user without CAP_DAC_OVERRIDE."""

    def retry(func: Callable[..., object], failed: str, _exc: object) -> None:
        os.chmod(os.path.dirname(failed), 0o700)
        if func in (os.unlink, os.rmdir):  # the parent was not writable
            func(failed)
        else:  # the directory itself could not be opened or listed
            os.chmod(failed, 0o700)
            shutil.rmtree(failed, onerror=retry)

    if os.path.lexists(path):
        detach_under(path)  # its disk cap (a tmpfs), and anything a command mounted inside
        shutil.rmtree(path, onerror=retry)


def reap_dirs(root: str, prefix: str) -> list[str]:
    """Removes the `prefix`* directories under `root` whose owner is dead; returns them."""
    removed = []
    for entry in os.scandir(root):
        if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            with open(os.path.join(entry.path, OWNER_FILE), encoding="utf-8") as handle:
                owner = json.load(handle)
        except (OSError, ValueError):
            continue  # not one of ours, or being made right now
        if isinstance(owner, dict) and owner_is_dead(owner):
            kill_processes_using(entry.path)
            remove_tree(entry.path)
            removed.append(entry.path)
    return removed


def kill_processes_using(directory: str, rounds: int = 10) -> None:
    """SIGKILLs every process of a sandbox of `directory` (one that outlived its runner: bwrap
    cannot close the race of its parent dying while it starts): a process in a mount namespace
    of its own that has a place of the sandbox mounted elsewhere (/workspace, /tmp)."""
    device = None
    if os.path.ismount(directory):  # its disk cap: the binds show the tmpfs, not the path
        info = os.stat(directory).st_dev
        device = f"{os.major(info)}:{os.minor(info)}"
    own = _mount_namespace("self")
    for _ in range(rounds):
        # Never a process of our own mount namespace: every process of the host shares it, and
        # it shows the disk cap's mount too (at the directory itself).
        found = [
            pid
            for pid in _pids()
            if _mount_namespace(str(pid)) not in (own, None) and _uses(_mountinfo(pid), directory, device)
        ]
        if not found:
            return
        for pid in found:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)  # SIGKILL is delivered asynchronously


def _uses(mountinfo: bytes, directory: str, device: str | None) -> bool:
    """Whether a mount table binds a place of `directory` somewhere else than where it lies.
    A copy of the host's mount table shows the directory's own filesystem (its disk cap), at
    its place or moved (bwrap's pid 1 of any sandbox, while it sets up, has the host's mounts
    under /oldroot): that is the whole filesystem (root "/"), not a place of it, and says
    nothing; counting it killed other runners' sandboxes as they started."""
    path, name = os.fsencode(directory), b"/" + os.fsencode(os.path.basename(directory)) + b"/"
    for line in mountinfo.splitlines():
        fields = line.split(b" ")
        if len(fields) < 5 or fields[4] == path or fields[4].startswith(path + b"/"):
            continue  # the place where it lies: any copy of the host's mount table shows it
        if (device is not None and fields[2] == device.encode() and fields[3] != b"/") or name in fields[3]:
            return True
    return False


def _pids() -> list[int]:
    own = os.getpid()
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != own]


def _mount_namespace(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:  # gone, or not ours to inspect
        return None


def _mountinfo(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/mountinfo", "rb") as handle:
            return handle.read()
    except OSError:  # gone, or not ours to inspect
        return b""
