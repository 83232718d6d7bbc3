"""The local backend's directories: a pool per process and run, one owner marker per pool, and
slots that are emptied and handed to the next prompt instead of deleted and made again.

Layout under the root (default `<tmp>/agent-sandboxes`):

    <run_name>/<pool>.owner        JSON {host, pid, start, boot} of the process that owns the pool
    <run_name>/<pool>/<n>/         a slot: workspace/, home/, tmp/ (and the dataset's cwd, if any)

Why reuse: making and deleting four directories per prompt cost more CPU than everything else
the sandbox does. On ext4 without a journal the inode allocator skips every inode deleted in
the last minutes, so each mkdir got slower as a run went on (0.35 ms → 1 ms within seconds).
A slot goes back to the pool only after its processes are dead and everything in it is deleted,
so a prompt never sees another prompt's files or processes.

The marker is written before the pool dir is made and removed after it is deleted: a pool dir
without a marker is an orphan. `reap_stale` removes the pools of owners that died (kill -9).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import stat
import threading
from contextlib import suppress
from pathlib import Path
from types import TracebackType

from agent.errors import SandboxError
from agent.sandboxes.host.owner import current_owner, owner_is_dead
from agent.sandboxes.host.process_groups import kill_strays
from agent.sandboxes.host.sandbox_dirs import remove_tree

log = logging.getLogger(__name__)

SKELETON = ("workspace", "home", "tmp")  # what every slot holds when it is handed out
SMALL = 64  # files a slot may hold for it to be emptied on the event loop, not in a thread
POOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*-[0-9a-f]{12}")  # <prefix>-<random>


class SlotPool:
    """Sandbox directories of one run in this process. Use as a `with` block: leaving it kills
    whatever still runs under the pool and deletes the pool with its marker."""

    def __init__(self, root: str, run_name: str, prefix: str) -> None:
        self._run_dir = os.path.join(os.path.realpath(root), safe_name(run_name))
        self._prefix = safe_name(prefix)[:40]
        self.path = ""  # the pool dir, once claimed
        self._marker = ""
        self._free: list[str] = []
        self._made = 0
        self._lock = threading.Lock()

    def __enter__(self) -> SlotPool:
        self.path, self._marker = _claim_dir(self._run_dir, self._prefix)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close(strict=kind is None)  # never let a cleanup failure mask what is propagating

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

    def release(self, slot: str, *, strict: bool = True) -> None:
        """Empty the slot (its processes must be dead) and make it free; a slot that cannot be
        emptied is deleted instead, and that failure raised when `strict`."""
        try:
            _empty(slot)
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
        """`release` when the slot holds nothing but its skeleton and at most SMALL files in it,
        so that emptying it cannot take long; False, the slot not made free, otherwise."""
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
        """Kill every process still working in the pool, delete it, its marker, and the run dir
        once its last pool is gone."""
        path, self.path = self.path, ""  # closed once: leaving the `with` block after `close` is a no-op
        if not path:
            return
        kill_strays(path)  # only a sandbox left open reaches here with processes
        try:
            remove_tree(path)
            with suppress(FileNotFoundError):
                os.unlink(self._marker)
        except OSError as exc:
            _report(f"could not remove sandbox pool {path}: {exc}", exc, strict)
        with suppress(OSError):
            os.rmdir(self._run_dir)


def _report(message: str, exc: OSError, strict: bool) -> None:
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


def reap_stale(root: str) -> list[str]:
    """Delete the pools under `root` whose owner is dead, and pool dirs without a marker;
    returns the paths removed. Entries we cannot recognise are never touched."""
    base = Path(os.path.realpath(root))
    removed: list[str] = []
    for run_dir in (p for p in _entries(base) if p.is_dir()):
        for entry in _entries(run_dir):
            if not POOL_NAME.fullmatch(entry.name.removesuffix(".owner")):
                continue
            if entry.suffix == ".owner" and _owner_dead(entry):
                removed += _reap(entry.with_suffix(""), entry)
            elif entry.is_dir() and not entry.with_name(entry.name + ".owner").exists():
                removed += _reap(entry, None)  # markers outlive their dirs: this is an orphan
        with suppress(OSError):
            run_dir.rmdir()
    return removed


def safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:64]
    return cleaned or "_"


def _claim_dir(run_dir: str, prefix: str) -> tuple[str, str]:
    """Write an owner marker, then make the dir it owns; returns (realpath of dir, marker path)."""
    for _ in range(5):  # a concurrent reap_stale may remove the empty run dir under us
        os.makedirs(run_dir, exist_ok=True)
        name = f"{prefix}-{secrets.token_hex(6)}"
        path, marker = os.path.join(run_dir, name), os.path.join(run_dir, name + ".owner")
        try:
            _write_atomic(marker, json.dumps(current_owner()).encode())
            os.mkdir(path, 0o700)
        except FileNotFoundError:
            with suppress(FileNotFoundError):
                os.unlink(marker)
            continue
        return os.path.realpath(path), marker
    raise SandboxError(f"could not create a sandbox directory under {run_dir}")


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def _owner_dead(marker: Path) -> bool:
    try:
        owner = json.loads(marker.read_text())
        return owner_is_dead({str(k): str(v) for k, v in owner.items()})
    except (OSError, ValueError, AttributeError):
        return True  # unreadable marker: markers are written atomically, so its owner died


def _reap(path: Path, marker: Path | None) -> list[str]:
    existed = path.is_dir()
    kill_strays(str(path))
    try:
        remove_tree(str(path))
        if marker is not None:
            marker.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not reap stale sandbox %s: %s", path, exc)
        return []
    return [str(path)] if existed else []


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []
