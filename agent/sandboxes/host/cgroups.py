"""Control groups that hold a local sandbox's processes: whatever a command does (setsid,
double fork, `cd /`, dropping HOME) its descendants stay in the sandbox's group, and killing
the group kills every one of them, in one write where the kernel has `cgroup.kill`.

The hierarchy used is the first that works here, tried with a real process at first use:

- cgroup v2 (a `cgroup2` mount, e.g. `/sys/fs/cgroup` or hybrid `/sys/fs/cgroup/unified`):
  killed by `cgroup.kill` (Linux 5.14+), else frozen (`cgroup.freeze`) and each member SIGKILLed;
- cgroup v1 `freezer`: frozen, each member SIGKILLed, thawed (a frozen task dies once thawed);
- cgroup v1 `pids`: each member SIGKILLed, round after round, until none is left.

Groups are made under this process's own group in that hierarchy, which takes write access
there (root, or a delegated subtree). Where none works, `hierarchy()` is None and
`why_untracked()` says why.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import cache

from agent.sandboxes.host.mounts import unescape

KINDS = ("cgroup2", "freezer", "pids")  # in order of preference
KILL_WAIT = 5.0  # seconds for SIGKILLed members to be gone (a task in D state may take a while)


@dataclass(frozen=True)
class Hierarchy:
    """Where sandbox groups are made, and how they are killed."""

    kind: str  # one of KINDS (or "memory": v1 memory groups, see memory_limits)
    base: str  # this process's own group in that hierarchy
    kill_file: bool = False  # cgroup2: `cgroup.kill` exists (Linux 5.14+)

    def describe(self) -> str:
        version = "v2" if self.kind == "cgroup2" else f"v1 {self.kind}"
        how = "SIGKILL to each member" if self.kind in ("pids", "memory") else "freeze, SIGKILL, thaw"
        if self.kind == "cgroup2":
            how = "cgroup.kill" if self.kill_file else "freeze, SIGKILL to each member"
        return f"cgroup {version} at {self.base} ({how})"

    def group(self, *names: str) -> ProcessCgroup:
        return ProcessCgroup(self, os.path.join(self.base, *names))


class ProcessCgroup:
    """One group: `make` it, have processes join it (write their pid to `procs`), `kill` it
    whole, `remove` it."""

    def __init__(self, hierarchy: Hierarchy, path: str) -> None:
        self.hierarchy, self.path = hierarchy, path
        self.procs = os.path.join(path, "cgroup.procs")

    def child(self, name: str) -> ProcessCgroup:
        return ProcessCgroup(self.hierarchy, os.path.join(self.path, name))

    def make(self) -> ProcessCgroup:
        os.makedirs(self.path, exist_ok=True)
        return self

    def members(self) -> list[int]:
        try:
            with open(self.procs) as handle:
                return [int(pid) for pid in handle.read().split()]
        except FileNotFoundError:
            return []

    def empty(self) -> bool:
        """No process lives in the group (nor, on v2, in a group below it)."""
        if self.hierarchy.kind != "cgroup2":
            return not self.members()
        try:
            with open(os.path.join(self.path, "cgroup.events")) as handle:
                return "populated 0" in handle.read()
        except FileNotFoundError:
            return True

    def kill(self, wait: float = KILL_WAIT) -> bool:
        """SIGKILL every process in the group and wait until none is left; False when some
        still lives after `wait` seconds."""
        deadline, pause = time.monotonic() + wait, 0.0005
        while not self.empty():
            if time.monotonic() >= deadline:
                return False
            self._kill_once()
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        return True

    def remove(self, wait: float = KILL_WAIT) -> bool:
        """`kill`, then delete the group (and the groups below it); False when it stays."""
        if not os.path.isdir(self.path):
            return True
        with os.scandir(self.path) as entries:
            below = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
        alive = [name for name in below if not self.child(name).remove(wait)]
        if alive or not self.kill(wait):
            return False
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True

    def _kill_once(self) -> None:
        kind = self.hierarchy.kind
        if kind == "cgroup2" and self.hierarchy.kill_file:
            _write(os.path.join(self.path, "cgroup.kill"), "1")
        elif kind == "cgroup2":  # SIGKILL reaches frozen tasks on v2
            _write(os.path.join(self.path, "cgroup.freeze"), "1")
            _kill_all(self.members())
            _write(os.path.join(self.path, "cgroup.freeze"), "0")
        elif kind == "freezer":  # on v1 a frozen task dies when thawed: none forks meanwhile
            _write(os.path.join(self.path, "freezer.state"), "FROZEN")
            _kill_all(self.members())
            _write(os.path.join(self.path, "freezer.state"), "THAWED")
        else:
            _kill_all(self.members())


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _write(path: str, text: str) -> None:
    with suppress(FileNotFoundError), open(path, "w") as handle:
        handle.write(text)


def first_working(
    kinds: tuple[str, ...], probe_kind: Callable[[str], tuple[Hierarchy | None, str]]
) -> tuple[Hierarchy | None, str]:
    """The first of `kinds` whose probe finds a hierarchy, or None and each kind's reason."""
    reasons = []
    for kind in kinds:
        found, reason = probe_kind(kind)
        if found is not None:
            return found, ""
        reasons.append(f"{kind}: {reason}")
    return None, "; ".join(reasons)


@cache
def _discovered() -> tuple[Hierarchy | None, str]:
    return first_working(KINDS, probe)


def hierarchy() -> Hierarchy | None:
    """The hierarchy this process makes sandbox groups in; None where none works (see
    `why_untracked`). Probed once per process."""
    return _discovered()[0]


def why_untracked() -> str:
    """Why `hierarchy()` is None (each kind tried, with what failed); "" when it is not."""
    return _discovered()[1]


def probe(kind: str) -> tuple[Hierarchy | None, str]:
    """The hierarchy of `kind` (one of KINDS) when a real process can be put in a group of it
    and killed there; else None and why not."""
    base = own_group(kind)
    if base is None:
        return None, "not mounted here"
    found = Hierarchy(kind, base, kill_file=kind == "cgroup2")
    group = found.group(f"agent-probe-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        group.make()
    except OSError as exc:
        return None, f"cannot make a group under {base} ({exc.strerror})"
    try:
        if kind == "cgroup2":
            found = Hierarchy(kind, base, kill_file=os.path.exists(os.path.join(group.path, "cgroup.kill")))
            group = found.group(os.path.basename(group.path))
        return (found, "") if _joins(group) else (None, f"a process could not join a group under {base}")
    finally:
        group.remove(wait=1.0)


def _joins(group: ProcessCgroup) -> bool:
    """Whether a process that writes its pid to the group's `procs` is then in it, and dies by `kill`."""
    script = 'echo $$ >"$1" && read -r line'  # builtins only: waits on its stdin, needs no PATH
    argv = ["/bin/sh", "-c", script, "sh", group.procs]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        deadline = time.monotonic() + 2.0
        while proc.pid not in group.members() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        joined = proc.pid in group.members()
        killed = group.kill(wait=1.0)
        if proc.poll() is None:
            proc.kill()
        return joined and killed


def own_group(kind: str) -> str | None:
    """The directory of this process's group in the hierarchy of `kind`, None where it is not mounted."""
    mount = _mount_of(kind)
    if mount is None:
        return None
    mount_root, mount_point = mount
    path = _own_path(kind)
    if path is None or not (path == mount_root or path.startswith(mount_root.rstrip("/") + "/")):
        return None
    inside = path[len(mount_root) :].lstrip("/")
    return os.path.join(mount_point, inside) if inside else mount_point


def _mount_of(kind: str) -> tuple[str, str] | None:
    """(root, mount point) of the first mount of `kind`'s hierarchy in /proc/self/mountinfo."""
    for line in _lines("/proc/self/mountinfo"):
        fields, _, tail = line.partition(" - ")
        parts, rest = fields.split(), tail.split()
        if len(parts) < 5 or len(rest) < 3:
            continue
        fstype, options = rest[0], rest[2].split(",")
        if (kind == "cgroup2" and fstype == "cgroup2") or (fstype == "cgroup" and kind in options):
            return unescape(parts[3]), unescape(parts[4])
    return None


def _own_path(kind: str) -> str | None:
    for line in _lines("/proc/self/cgroup"):
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (kind == "cgroup2" and number == "0" and not controllers) or kind in controllers.split(","):
            return path
    return None


def _lines(path: str) -> list[str]:
    try:
        with open(path) as handle:
            return handle.read().splitlines()
    except OSError:
        return []
