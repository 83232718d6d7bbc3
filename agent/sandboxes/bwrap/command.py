"""The bubblewrap command line for one sandboxed process: namespaces, the read-only root,
the writable binds, the cleared environment and the rlimits.

The root is bwrap's own tmpfs, remounted read-only at the end, holding read-only binds of
either the host's system directories (`/usr` and its merged-usr links plus a short list of
harmless `/etc` files: no `/etc/shadow`, no home directories) or every top-level entry of an
unpacked image root. Writable: `/workspace`, `/tmp` and, when the prompt's cwd lies elsewhere,
that directory; all three are per-sandbox host directories.

Memory: where a memory cgroup works (see host.memory_limits), the launcher joins the sandbox's
group before anything else runs, so the memory option bounds all of the sandbox's processes
together; elsewhere it is an address-space rlimit per process (it counts virtual memory, so
runtimes that reserve large arenas need more). Other limits are rlimits set by `prlimit`
around bwrap: processes (the pids option),
file size (at most the disk option), open files and no core dumps. The process limit only
binds a uid other than host root, which is one reason a root runner starts bwrap under a
per-sandbox uid (inside, the sandbox still sees itself as root of its own user namespace).
Under a root runner the sandbox's directory is also a tmpfs of the disk option's size, which
bounds all that its commands and files write (see sandbox).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from agent.protocols import SandboxOptions

HOST_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
HOST_ETC = (
    "alternatives",
    "ca-certificates",
    "debian_version",
    "group",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "services",
    "ssl",
)
IMAGE_SKIP = {"proc", "dev", "sys", "tmp", "workspace"}  # mounted fresh, never from the image
FILE_SIZE_LIMIT = 1 << 30
OPEN_FILES_LIMIT = 4096
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/workspace",
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
}


@dataclass(frozen=True)
class Layout:
    """Where things are: `image_root` None means the host's system directories."""

    image_root: str | None
    binds: tuple[tuple[str, str], ...]  # (host dir, sandbox dir), writable
    workdir: str


def _entry(source: str, target: str) -> list[str]:
    """Mirrors one path read-only: a symlink stays a symlink, anything else is bound."""
    if os.path.islink(source):
        return ["--symlink", os.readlink(source), target]
    return ["--ro-bind", source, target]


def root_mounts(image_root: str | None) -> list[str]:
    args: list[str] = []
    if image_root is None:
        for name in HOST_SYSTEM:
            if os.path.lexists(f"/{name}"):
                args += _entry(f"/{name}", f"/{name}")
        etc = [f"/etc/{name}" for name in HOST_ETC] + sorted(glob.glob("/etc/python3*"))
        for path in etc:
            if os.path.lexists(path):
                args += _entry(path, path)
        return args
    for name in sorted(os.listdir(image_root)):
        if name not in IMAGE_SKIP:
            args += _entry(os.path.join(image_root, name), f"/{name}")
    return args


# The launcher dies with the runner (SIGKILL once the thread that started it ends), without
# the race of a runner that dies between fork and prctl: then $PPID is no longer the runner.
DIE_WITH_RUNNER = [
    "setpriv",
    "--pdeathsig",
    "KILL",
    "--",
    "/bin/sh",
    "-c",
    '[ "$PPID" = "$0" ] || exit 125; exec "$@"',
]
# Joins the sandbox's memory cgroup, before any uid switch (the group is root's), then runs the rest.
JOIN_MEMORY = [
    "/bin/sh",
    "-c",
    '{ echo $$ >"$0"; } 2>/dev/null || { echo "sandbox: could not join its memory cgroup" >&2; exit 125; }'
    '; exec "$@"',
]


def _launcher(user: int | None, memory_procs: str | None) -> list[str]:
    """Joining the memory cgroup (as root), then switching to the sandbox's uid."""
    join = [] if memory_procs is None else [*JOIN_MEMORY, memory_procs]
    switch = [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--"]
    return [*join, *switch]


def bwrap_argv(
    layout: Layout,
    options: SandboxOptions,
    nproc: int,
    script: str,
    args: list[str],
    info_fd: int | None = None,
    user: int | None = None,
    memory_procs: str | None = None,
) -> list[str]:
    """`setpriv --pdeathsig KILL ... prlimit ... -- bwrap ... -- /bin/sh -c script sh args...`;
    with `info_fd`, bwrap writes its namespace's pid 1 there (see launch); with `user`, all of
    it runs under that uid and gid (switched by setpriv, not by the runner: a process that sets
    a uid between fork and exec cannot use vfork, and forking a 300 MB worker took 170 ms); with
    `memory_procs` (a memory cgroup's `cgroup.procs`), all of it joins that group first."""
    per_process = options.memory_mb > 0 and memory_procs is None  # no group: an rlimit per process
    limits = [
        *_launcher(user, memory_procs),
        *DIE_WITH_RUNNER,
        str(os.getpid()),
        "prlimit",
        *([f"--as={options.memory_mb << 20}"] if per_process else []),
        f"--nproc={nproc}",
        f"--fsize={min(FILE_SIZE_LIMIT, options.disk_mb << 20)}",
        f"--nofile={OPEN_FILES_LIMIT}",
        "--core=0",
        "--",
    ]
    isolation = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "0", "--gid", "0"]
    isolation += ["--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"]
    if info_fd is not None:
        isolation += ["--info-fd", str(info_fd)]
    mounts = [*root_mounts(layout.image_root), "--proc", "/proc", "--dev", "/dev"]
    for host_dir, sandbox_dir in layout.binds:
        mounts += ["--bind", host_dir, sandbox_dir]
    mounts += ["--remount-ro", "/", "--chdir", layout.workdir]
    env = [arg for name, value in ENV.items() for arg in ("--setenv", name, value)]
    return [*limits, *isolation, *mounts, *env, "--", "/bin/sh", "-c", script, "sh", *args]
