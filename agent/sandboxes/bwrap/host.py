"""The bwrap backend's footing on the host: whether bwrap works here (a probe sandbox), the
uid a root runner gives each sandbox, and reaping what a killed runner left."""

from __future__ import annotations

import os
import shutil
import tempfile

from agent.protocols import SandboxOptions
from agent.sandboxes.bwrap.command import Layout, bwrap_argv
from agent.sandboxes.host import memory_limits
from agent.sandboxes.host.cgroups import ProcessCgroup
from agent.sandboxes.host.owner import process_start_time
from agent.sandboxes.host.sandbox_dirs import reap_dirs
from agent.sandboxes.host.sandbox_process import run_process

DIR_PREFIX = "bwrap-"
SANDBOX_UID_BASE = 2_000_000_000  # a root runner gives each sandbox its own uid above this
_probe_verdicts: dict[int, str | None] = {}


def sandbox_uid(sandbox_id: str) -> int | None:
    return SANDBOX_UID_BASE + int(sandbox_id[:6], 16) if os.geteuid() == 0 else None


def memory_group(sandbox_id: str, memory_mb: int) -> ProcessCgroup | None:
    """A memory cgroup holding a sandbox's processes to `memory_mb` together; None where no
    memory cgroup works here (then each process gets an rlimit, see command) or with no limit.
    Named like the local pools' groups (`agent-<pid>-<start>-...`), so a later run reaps the
    groups of a runner that died (local.tracking.reap_orphaned)."""
    found = memory_limits.hierarchy() if memory_mb > 0 else None
    if found is None:
        return None
    pid = os.getpid()
    return memory_limits.limited(
        found.group(f"agent-{pid}-{process_start_time(pid)}-bwrap-{sandbox_id[:12]}"), memory_mb
    )


def unavailable_reason(options: SandboxOptions) -> str | None:
    for tool, package in (("bwrap", "bubblewrap"), ("prlimit", "util-linux"), ("setpriv", "util-linux")):
        if shutil.which(tool) is None:
            return (
                f"`{tool}` is not installed; install the `{package}` package (e.g. apt-get install {package})"
            )
    pid = os.getpid()
    if pid not in _probe_verdicts:
        _probe_verdicts[pid] = _probe(options)
    return _probe_verdicts[pid]


def _probe(options: SandboxOptions) -> str | None:
    layout = Layout(image_root=None, binds=(), workdir="/")
    uid = sandbox_uid("000000")
    nproc = options.pids_limit + (0 if uid is not None else tasks_of(os.getuid()))
    argv = bwrap_argv(layout, options, nproc, "exit 0", [], user=uid)
    outcome = run_process(argv, timeout=30, limit=65536)
    if outcome.exit_code == 0:
        return None
    return (
        f"bwrap cannot create a sandbox here ({outcome.failure()}); it needs unprivileged user namespaces "
        "(sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04+ also "
        "kernel.apparmor_restrict_unprivileged_userns=0)"
    )


def tasks_of(uid: int) -> int:
    """How many processes `uid` runs now (the process limit counts them all for non-root)."""
    count = 0
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += 1
        except OSError:
            continue  # exited while we looked
    return count


def reap_stale(root: str | None = None) -> list[str]:
    """Deletes sandbox directories under `root` (default: the temp dir) whose owner process
    is dead: a runner killed with SIGKILL leaves them behind (its bwrap processes die with
    it). Returns the paths removed."""
    return reap_dirs(root or tempfile.gettempdir(), DIR_PREFIX)
