"""The local backend's slots: a pool of sandbox directories per process and run, whose slots
are emptied and handed to the next prompt instead of deleted and made again.

Layout under the root (default `<tmp>/agent-sandboxes`; see `pool_dirs` for the pool itself):

    <run_name>/<pool>/<n>/         a slot: workspace/, home/, tmp/ (and the dataset's cwd, if any)

Why reuse: making and deleting four directories per prompt cost more CPU than everything else
the sandbox does. On ext4 without a journal the inode allocator skips every inode deleted in
the last minutes, so each mkdir got slower as a run went on (0.35 ms → 1 ms within seconds;
2.4 ms for the four on this machine's ext4 under load).

A slot is reused only when nothing of its last prompt can reach it: its cgroup is empty (see
`tracking`: no process of the prompt lives, whatever it did to hide) and no mount is left under
it (mounts are detached first). Without a cgroup, a process may have shed what identifies it,
so every prompt gets a fresh directory and the old one is deleted.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from contextlib import suppress
from types import TracebackType

from agent.errors import SandboxError
from agent.sandboxes.host import memory_limits, orphans
from agent.sandboxes.host.cgroups import ProcessCgroup
from agent.sandboxes.host.mounts import detach_under, mounts_under
from agent.sandboxes.host.sandbox_dirs import remove_tree
from agent.sandboxes.local.oom_counter import OomCounter
from agent.sandboxes.local.pool_dirs import claim_dir, reap_stale, remove_pool, safe_name
from agent.sandboxes.local.tracking import PoolGroups

__all__ = ["SKELETON", "SlotPool", "reap_stale", "safe_name"]

log = logging.getLogger(__name__)

SKELETON = ("workspace", "home", "tmp")  # what every slot holds when it is handed out
SMALL = 64  # files a slot may hold for it to be emptied on the event loop, not in a thread


class SlotPool:
    """Sandbox directories of one run in this process. Use as a `with` block: leaving it kills
    whatever still runs under the pool and deletes the pool with its marker."""

    def __init__(self, root: str, run_name: str, prefix: str, memory_mb: int = 0) -> None:
        self._memory_mb = memory_mb  # each slot's limit, where a memory cgroup works (0: none)
        self._run_dir = os.path.join(os.path.realpath(root), safe_name(run_name))
        self._prefix = safe_name(prefix)[:40]
        self.path = ""  # the pool dir, once claimed
        self._marker = ""
        self._groups: PoolGroups | None = None
        self._free: list[str] = []
        self._made = 0
        self._lock = threading.Lock()
        # Each slot's groups, made (and limited) on its first use: a reused slot keeps them, as it
        # keeps its directories (making them again cost ~0.1 ms of system calls per prompt).
        self._slot_groups: dict[str, tuple[ProcessCgroup | None, ProcessCgroup | None]] = {}
        self._oom: dict[str, OomCounter] = {}  # each slot's, its descriptor kept (see oom_counter)

    def __enter__(self) -> SlotPool:
        self.path, self._marker = claim_dir(self._run_dir, self._prefix)
        self._groups = PoolGroups.open(self.path, self._memory_mb)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close(strict=kind is None)  # never let a cleanup failure mask what is propagating

    @property
    def tracked(self) -> bool:
        """Whether each slot's processes are held by a cgroup (else: process groups, cwd, HOME)."""
        return self._groups is not None

    def acquire(self) -> str:
        """An empty slot (its skeleton made), reused when one is free."""
        with self._lock:
            if self._free:
                return self._free.pop()
            self._made += 1
            slot = os.path.join(self.path, str(self._made))
        os.mkdir(slot, 0o700)
        for name in SKELETON:
            os.mkdir(os.path.join(slot, name), 0o700)
        return slot

    def groups(self, slot: str) -> tuple[ProcessCgroup | None, ProcessCgroup | None]:
        """(the cgroup holding the slot's processes, None when untracked; the memory cgroup
        holding them to the pool's limit, None without one), made on the slot's first use."""
        found = self._slot_groups.get(slot)
        if found is None:
            groups = self._groups
            found = (None, None) if groups is None else (groups.slot(slot), groups.memory(slot))
            self._slot_groups[slot] = found
        return found

    def oom_counter(self, slot: str) -> OomCounter | None:
        """The OOM kills of the slot's memory cgroup (None without one)."""
        counter = self._oom.get(slot)
        if counter is None:
            memory = self.groups(slot)[1]
            if memory is None:
                return None
            counter = self._oom[slot] = OomCounter(memory_limits.oom_file(memory))
        return counter

    @property
    def memory_mb(self) -> int:
        """The limit a slot's memory cgroup holds its processes to; 0 when there is none."""
        return 0 if self._groups is None else self._groups.memory_mb

    def join_env(self, group: ProcessCgroup | None, memory: ProcessCgroup | None = None) -> dict[str, str]:
        """Environment variables that make a command join `group` and `memory` (see `tracking`)."""
        return {} if self._groups is None or group is None else self._groups.env(group, memory)

    def release(self, slot: str, *, strict: bool = True, reusable: bool = True) -> None:
        """Detach mounts under the slot, then empty it and make it free (its processes must be
        dead); when it cannot be reused (untracked, or `reusable` is False) delete it instead.
        A slot that cannot be emptied is deleted; one with a mount that stays is left alone.
        Failures are raised as SandboxError when `strict`, else logged."""
        try:
            detach_under(slot)
            if self._groups is None or not reusable:
                remove_tree(slot)
                return
            _empty(slot)
        except SandboxError as exc:  # a mount stayed: deleting would go through it
            _report(str(exc), exc, strict)
            return
        except OSError as exc:
            if not os.path.lexists(slot):
                return  # deleted under us (reap_stale saw a dead owner): nothing left to clean
            with suppress(OSError):
                remove_tree(slot)
            _report(f"could not empty sandbox {slot}: {exc}", exc, strict)
            return
        with self._lock:
            self._free.append(slot)

    def release_small(self, slot: str) -> bool:
        """`release` when the slot is reusable, has no mount under it, and holds nothing but its
        skeleton and at most SMALL files in it, so that emptying it cannot take long; False,
        the slot not made free, otherwise."""
        if self._groups is None or mounts_under(slot):
            return False
        try:
            doomed = _few_files(slot)
            if doomed is None:
                return False
            for path in doomed:
                os.unlink(path)
        except OSError:
            return False  # `release` knows how to deal with whatever this was
        with self._lock:
            self._free.append(slot)
        return True

    def close(self, *, strict: bool = True) -> None:
        """Kill every process still working in the pool, detach its mounts, delete it, its
        marker, and the run dir once its last pool is gone."""
        path, self.path = self.path, ""  # closed once: leaving the `with` block after `close` is a no-op
        if not path:
            return
        for counter in self._oom.values():  # before the groups go: nothing of theirs held open
            counter.close()
        if self._groups is not None and not self._groups.close():
            log.warning("some processes of sandbox pool %s could not be killed", path)
        if orphans.adopting():  # every orphan we adopted is some sandbox's: none outlives the pool
            orphans.kill_adopted(None)
        try:
            remove_pool(path)
            with suppress(FileNotFoundError):
                os.unlink(self._marker)
        except SandboxError as exc:  # a mount stayed: the pool is left, said once, never a traceback
            log.warning("could not remove sandbox pool %s: %s", path, exc)
        except OSError as exc:
            _report(f"could not remove sandbox pool {path}: {exc}", exc, strict)
        with suppress(OSError):
            os.rmdir(self._run_dir)


def _report(message: str, exc: Exception, strict: bool) -> None:
    if strict:
        raise SandboxError(message) from exc
    log.warning(message)


def _few_files(slot: str) -> list[str] | None:
    """The files in the slot's skeleton dirs when the slot holds nothing else (no other entry,
    no directory in them, skeleton modes intact) and they are at most SMALL; else None."""
    files: list[str] = []
    found = 0
    with os.scandir(slot) as entries:
        for entry in entries:
            found += 1
            info = entry.stat(follow_symlinks=False)
            if (
                entry.name not in SKELETON
                or not stat.S_ISDIR(info.st_mode)
                or stat.S_IMODE(info.st_mode) != 0o700
            ):
                return None
            with os.scandir(entry.path) as inside:
                for item in inside:
                    if item.is_dir(follow_symlinks=False) or len(files) == SMALL:
                        return None
                    files.append(item.path)
    return files if found == len(SKELETON) else None


def _empty(slot: str) -> None:
    """Delete everything in the slot but its skeleton, and everything inside the skeleton;
    remake skeleton dirs the sandbox deleted or replaced (a symlink is removed, never followed)."""
    found = set()
    with os.scandir(slot) as entries:
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            if entry.name in SKELETON and stat.S_ISDIR(info.st_mode):
                found.add(entry.name)
                if stat.S_IMODE(info.st_mode) != 0o700:
                    os.chmod(entry.path, 0o700)  # chmod 000 would stop the listing below
                _empty_dir(entry.path)
            elif stat.S_ISDIR(info.st_mode):
                remove_tree(entry.path)
            else:
                os.unlink(entry.path)
    for name in SKELETON:
        if name not in found:
            os.mkdir(os.path.join(slot, name), 0o700)


def _empty_dir(directory: str) -> None:
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                remove_tree(entry.path)
            else:
                os.unlink(entry.path)
