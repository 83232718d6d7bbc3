"""Who owns a sandbox: host, pid, the process's start time and the boot id, recorded when the
sandbox is made (container labels, a file next to a bwrap workspace) so that a later run can
tell whether the owner died and the sandbox is stale. The start time and boot id make a
recycled pid harmless; a sandbox owned by another host is never judged dead.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

FIELDS = ("host", "pid", "start", "boot")


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def process_start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" where /proc is unavailable)."""
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


def current_owner() -> dict[str, str]:
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": str(pid),
        "start": process_start_time(pid),
        "boot": boot_id(),
    }


def _pid_alive(pid: int) -> bool:
    """Running, not merely not yet reaped: kill(pid, 0) succeeds on a zombie, and a killed
    runner's processes stay zombies until init reaps them (seen: 1.6 s)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no procfs: trust kill()
    return state != "Z"


def owner_is_dead(owner: Mapping[str, str]) -> bool:
    """True when the owner certainly died; False when it lives or lives on another host."""
    if owner.get("host") != socket.gethostname():
        return False
    boot = owner.get("boot", "")
    if boot and boot != boot_id():
        return True
    pid = owner.get("pid", "")
    if not pid.isdigit() or not _pid_alive(int(pid)):
        return True
    start = owner.get("start", "")
    return bool(start) and start != process_start_time(int(pid))
