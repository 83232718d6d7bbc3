"""How the local backend knows which processes are a prompt's: a control group per slot where
this machine gives us one (see `host.cgroups`), else their process groups and a cwd or HOME
inside the sandbox (see `host.process_groups`), which a command can shed.

With a group, every command joins its slot's group before anything of it runs: bash reads the
pool's join script through BASH_ENV (no extra process), writes its own pid to the group's
`cgroup.procs`, and unsets both variables; it refuses to run (exit 125) if it cannot join.
Its descendants inherit the group whatever they do, so closing the sandbox kills the group
whole (`cgroup.kill`: one write), and an empty group proves that nothing of the prompt lives on,
which is what makes reusing the slot for the next prompt safe.

Layout: `<our group>/agent-<owner pid>-<owner start time>-<pool dir name>/<slot number>`: the
owner in the name lets a later run kill and delete the groups of a worker that died (kill -9)
even when its pool directory is gone.
"""

from __future__ import annotations

import logging
import os
import socket
from contextlib import suppress

from agent.sandboxes.host import cgroups, memory_limits
from agent.sandboxes.host.cgroups import Hierarchy, ProcessCgroup
from agent.sandboxes.host.owner import boot_id, owner_is_dead, process_start_time

log = logging.getLogger(__name__)

JOIN_SCRIPT = (
    '{ echo $$ >"$SANDBOX_CGROUP_PROCS"; } 2>/dev/null'
    ' || { echo "sandbox: this command could not join its sandbox'
    "'"
    's cgroup" >&2; exit 125; }\n'
    # the memory group (see host.memory_limits), where it lies in another hierarchy (cgroup v1)
    '[ -z "${SANDBOX_MEMORY_PROCS-}" ] || { echo $$ >"$SANDBOX_MEMORY_PROCS"; } 2>/dev/null'
    ' || { echo "sandbox: this command could not join its sandbox'
    "'"
    's memory cgroup" >&2; exit 125; }\n'
    "unset BASH_ENV SANDBOX_CGROUP_PROCS SANDBOX_MEMORY_PROCS\n"
)
JOIN_FILE = ".join-cgroup.sh"  # in the pool dir, beside the slots


def tracked() -> bool:
    """Whether a cgroup tracks local sandboxes' processes in this process."""
    return cgroups.hierarchy() is not None


def describe() -> str:
    """One line for the log: what tracks a local sandbox's processes here, and why."""
    found = cgroups.hierarchy()
    if found is not None:
        return f"local sandboxes: each prompt's processes are tracked and killed by a {found.describe()}"
    return (
        "local sandboxes: no usable cgroup here, so processes are tracked by process group, "
        "cwd and HOME only (a process that leaves all three outlives its prompt until the worker "
        f"ends; each prompt gets a fresh directory): {cgroups.why_untracked()}"
    )


class PoolGroups:
    """The groups of one slot pool; `None` from `open` where no hierarchy works."""

    def __init__(self, found: Hierarchy, pool_dir: str, memory_mb: int = 0) -> None:
        self._top = found.group(group_name(pool_dir))
        self._join = os.path.join(pool_dir, JOIN_FILE)
        memory = memory_limits.hierarchy() if memory_mb > 0 else None
        self.memory_mb = memory_mb if memory is not None else 0  # 0: no memory group
        self._memory_top = None if memory is None else memory.group(group_name(pool_dir))

    @classmethod
    def open(cls, pool_dir: str, memory_mb: int = 0) -> PoolGroups | None:
        """The pool's groups; with `memory_mb`, each slot's memory is limited where a memory
        cgroup works here (`memory_mb` is 0 otherwise)."""
        found = cgroups.hierarchy()
        if found is None:
            return None
        groups = cls(found, pool_dir, memory_mb)
        try:
            groups._top.make()
            with open(groups._join, "w", encoding="ascii") as handle:
                handle.write(JOIN_SCRIPT)
            os.chmod(groups._join, 0o444)
        except OSError as exc:
            log.warning("local sandboxes: cannot make a cgroup (%s): tracking by cwd and HOME", exc)
            groups.close()
            return None
        return groups

    def slot(self, slot_dir: str) -> ProcessCgroup:
        """The group of a slot, made now if it is new."""
        return self._top.child(os.path.basename(slot_dir)).make()

    def memory(self, slot_dir: str) -> ProcessCgroup | None:
        """The memory group of a slot, made now if it is new (None without a memory limit)."""
        if self._memory_top is None:
            return None
        return memory_limits.limited(self._memory_top.child(os.path.basename(slot_dir)), self.memory_mb)

    def env(self, group: ProcessCgroup, memory: ProcessCgroup | None = None) -> dict[str, str]:
        """What a slot's commands need in their environment to join `group` (and `memory`)."""
        joins = {"BASH_ENV": self._join, "SANDBOX_CGROUP_PROCS": group.procs}
        if memory is not None and memory.path != group.path:  # v2: the same group holds both
            joins["SANDBOX_MEMORY_PROCS"] = memory.procs
        return joins

    def close(self) -> bool:
        """Kill every process in the pool's groups and delete them; False when some stay."""
        removed = self._top.remove()
        return (self._memory_top is None or self._memory_top.remove()) and removed


def group_name(pool_dir: str) -> str:
    """The name of the group of a pool this process owns."""
    pid = os.getpid()
    return f"agent-{pid}-{process_start_time(pid)}-{os.path.basename(pool_dir.rstrip('/'))}"


def reap(pool_dir: str) -> None:
    """Kill and delete the groups of a pool whose owner died."""
    suffix = "-" + os.path.basename(pool_dir.rstrip("/"))
    for group in _groups():
        if group.path.endswith(suffix):
            with suppress(OSError):
                group.remove()


def reap_orphaned() -> list[str]:
    """Kill and delete the pool groups whose owner process died, whatever became of their
    directories; returns their paths."""
    removed = []
    for group in _groups():
        pid, _, rest = os.path.basename(group.path).removeprefix("agent-").partition("-")
        start = rest.partition("-")[0]
        if not pid.isdigit() or not owner_is_dead(_owner(pid, start)):
            continue
        with suppress(OSError):
            if group.remove():
                removed.append(group.path)
    return removed


def _owner(pid: str, start: str) -> dict[str, str]:
    return {"host": socket.gethostname(), "pid": pid, "start": start, "boot": boot_id()}


def _groups() -> list[ProcessCgroup]:
    """Our groups in the tracking hierarchy and in the memory one (local pools and bwrap sandboxes)."""
    found: list[ProcessCgroup] = []
    for hierarchy in {cgroups.hierarchy(), memory_limits.hierarchy()}:
        if hierarchy is None:
            continue
        try:
            with os.scandir(hierarchy.base) as entries:
                names = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        found += [hierarchy.group(n) for n in names if n.startswith("agent-") and "probe-" not in n]
    return found
