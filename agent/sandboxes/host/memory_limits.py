"""A memory limit per sandbox: one memory cgroup per sandbox caps what all of its processes
hold together (`memory.max` on cgroup v2, `memory.limit_in_bytes` on v1; swap counted too, so
a memory hog is killed rather than slowed to a crawl by swapping). When a sandbox reaches it,
the kernel's OOM killer picks one of that sandbox's processes, never a worker or another
prompt's command, and the group's `oom_kill` counter tells the command's caller why it died.

The hierarchy is the first that works here, tried at first use: cgroup v2 where the memory
controller can be handed to our own group's children, else cgroup v1 `memory`. Groups are made
under this process's own group there (root, or a delegated subtree). Where neither works,
`hierarchy()` is None, `why_unlimited()` says why, and each sandboxed process gets an
RLIMIT_AS of the limit instead (virtual memory, per process: a weaker bound).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from functools import cache

from agent.protocols import ExecResult
from agent.sandboxes.host import cgroups
from agent.sandboxes.host.cgroups import Hierarchy, ProcessCgroup

KINDS = ("cgroup2", "memory")  # in order of preference
OOM_EXIT_CODE = 137  # 128 + SIGKILL: what the OOM killer leaves


def oom_message(limit_mb: int) -> str:
    return f"[the command was killed: the sandbox's memory limit ({limit_mb} MB) was reached]"


@cache
def _discovered() -> tuple[Hierarchy | None, str]:
    return cgroups.first_working(KINDS, probe)


def hierarchy() -> Hierarchy | None:
    """Where this process makes sandbox memory groups; None where none works. Probed once."""
    return _discovered()[0]


def why_unlimited() -> str:
    """Why `hierarchy()` is None (each kind tried, with what failed); "" when it is not."""
    return _discovered()[1]


def describe(limit_mb: int) -> str:
    """One line for the log: how a sandbox's memory is bounded here."""
    if limit_mb <= 0:
        return "sandbox memory: no limit (--sandbox_memory_mb=0)"
    found = hierarchy()
    if found is not None:
        return f"sandbox memory: {limit_mb} MB per sandbox, all its processes together ({found.describe()})"
    return (
        f"sandbox memory: no usable memory cgroup here, so each sandboxed process gets an address-space "
        f"limit (RLIMIT_AS) of {limit_mb} MB instead of one limit per sandbox: {why_unlimited()}"
    )


def probe(kind: str) -> tuple[Hierarchy | None, str]:
    """The hierarchy of `kind` when a group with a memory limit can be made in it; else why not."""
    base = cgroups.own_group(kind)
    if base is None:
        return None, "not mounted here"
    found = Hierarchy(kind, base)
    group = found.group(f"agent-memprobe-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        limited(group, 64)
    except OSError as exc:
        return None, f"cannot make a group with a memory limit under {base} ({exc.strerror or exc})"
    finally:
        group.remove(wait=1.0)
    return found, ""


def limited(group: ProcessCgroup, limit_mb: int) -> ProcessCgroup:
    """`group` made (when new) with a memory limit of `limit_mb` for all its processes, swap included."""
    size = str(limit_mb << 20)
    if group.hierarchy.kind == "cgroup2":
        _enable_memory(group)
        group.make()
        _set(group, "memory.max", size)
        _set(group, "memory.swap.max", "0", optional=True)  # absent without swap accounting
    else:
        group.make()
        _set(group, "memory.limit_in_bytes", size)
        _set(group, "memory.memsw.limit_in_bytes", size, optional=True)  # memory + swap; set after
    return group


def _enable_memory(group: ProcessCgroup) -> None:
    """Hand the memory controller down from our own group to `group`'s parent (v2 only)."""
    base = group.hierarchy.base
    parents = []
    path = os.path.dirname(group.path)
    while path.startswith(base.rstrip("/") + "/"):
        parents.append(path)
        path = os.path.dirname(path)
    for directory in [base, *reversed(parents)]:
        control = os.path.join(directory, "cgroup.subtree_control")
        with open(control) as handle:
            if "memory" in handle.read().split():
                continue
        os.makedirs(directory, exist_ok=True)
        with open(control, "w") as handle:
            handle.write("+memory")


def _set(group: ProcessCgroup, name: str, value: str, optional: bool = False) -> None:
    path = os.path.join(group.path, name)
    if optional and not os.path.exists(path):
        return
    with open(path, "w") as handle:
        handle.write(value)


def oom_kills(group: ProcessCgroup | None) -> int:
    """How many processes the OOM killer took from `group` (and the groups below it) so far."""
    if group is None:
        return 0
    try:
        with open(oom_file(group)) as handle:
            return count_oom_kills(handle.read())
    except OSError:
        return 0


def oom_file(group: ProcessCgroup) -> str:
    """The file of `group` that counts its OOM kills."""
    name = "memory.events" if group.hierarchy.kind == "cgroup2" else "memory.oom_control"
    return os.path.join(group.path, name)


def count_oom_kills(text: str) -> int:
    """The OOM kills counted in the text of an `oom_file`."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def noted(result: ExecResult, group: ProcessCgroup | None, kills_before: int, limit_mb: int) -> ExecResult:
    """`result` with a line saying that the memory limit was reached when the OOM killer took a
    process of the sandbox while the command ran (the model sees it and may try another way)."""
    if group is None or oom_kills(group) <= kills_before:
        return result
    output = result.output + ("\n" if result.output and not result.output.endswith("\n") else "")
    return dataclasses.replace(result, output=output + oom_message(limit_mb))
