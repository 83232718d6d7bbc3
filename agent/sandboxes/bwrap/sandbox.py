"""The bubblewrap backend: every command runs in fresh pid/net/ipc/uts/mount/user namespaces
(only `lo`, its own pid 1), on a read-only root, with a cleared environment and rlimits (see
bwrap_command); all of a sandbox's processes share one memory cgroup of `memory_mb` where one
works (an OOM kill is told in the command's result). Starts take milliseconds and need no daemon.

A prompt's sandbox is a host directory holding its `/workspace` and `/tmp` (and its cwd when
that lies outside both); files persist across the prompt's commands, processes do not: when a
command ends its pid namespace ends with it, before its call returns (see `launch`). A timeout
kills the whole namespace. Leaving the block deletes the directory. Under a root runner the
directory is a tmpfs of `disk_mb`: a write past it fails with ENOSPC. Sandboxes die with a
runner killed by SIGKILL (parent death signals); `reap_stale` deletes what such a runner left,
first killing any process that still uses it (bwrap cannot close the race of its parent dying
while it sets itself up).

A dataset row's image is used when it names an unpacked root filesystem directory (an
absolute path); otherwise (e.g. a registry name) the host's `/usr` is the root.

Files: paths under the writable places are read and written on the host directly, each
lookup held beneath its place by the kernel (see host_files: the sandbox may swap directories
meanwhile); anything else, or a symlink leading out of its place, is read or written inside
the sandbox (so it sees exactly the sandbox's view, with its rights); writing on the
read-only root raises SandboxPathError.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import re
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from agent.errors import SandboxError, SandboxPathError
from agent.protocols import ExecResult, SandboxOptions, SandboxProcess, SandboxSpec
from agent.sandboxes import shell_scripts
from agent.sandboxes.blocking import ThreadedSandbox, in_thread, to_the_end
from agent.sandboxes.bwrap import host_files
from agent.sandboxes.bwrap.command import Layout, bwrap_argv, root_mounts

__all__ = ["BwrapSandbox", "BwrapThreaded", "open_sandbox", "reap_stale", "unavailable_reason"]
from agent.sandboxes.bwrap.host import (
    DIR_PREFIX,
    memory_group,
    reap_stale,
    sandbox_uid,
    tasks_of,
    unavailable_reason,
)
from agent.sandboxes.bwrap.launch import Launches, spawned
from agent.sandboxes.host import memory_limits
from agent.sandboxes.host.cgroups import ProcessCgroup
from agent.sandboxes.host.sandbox_dirs import make_sandbox_dir, remove_tree
from agent.sandboxes.host.sandbox_process import ProcessOutcome, kill_running, run_process
from agent.sandboxes.shell_scripts import SPAWN, spawn_args

WRITABLE = ("/workspace", "/tmp")


def open_sandbox(spec: SandboxSpec, options: SandboxOptions) -> AbstractAsyncContextManager[BwrapThreaded]:
    """The prompt's sandbox, used from the event loop: commands run on the loop (`launch`),
    file work in threads; entering it makes its directory, leaving it ends every command of
    it and deletes it (to the end, however the block is left)."""
    return _opened(BwrapSandbox(spec, options))


@asynccontextmanager
async def _opened(sandbox: BwrapSandbox) -> AsyncIterator[BwrapThreaded]:
    try:
        sandbox.prepare()
        outcome = await sandbox.launch("exit 0", [], timeout=30)
        if outcome.exit_code != 0:
            raise SandboxError(f"bwrap could not start the sandbox: {outcome.failure()}")
        yield BwrapThreaded(sandbox)
    finally:
        await to_the_end(asyncio.ensure_future(sandbox.aclose()))


def _image_root(spec: SandboxSpec) -> str | None:
    image = spec.image or ""
    if not image.startswith("/"):
        return None
    if not os.path.lexists(os.path.join(image, "bin/sh")):
        raise SandboxError(f"image root {image} is not an unpacked root filesystem (no /bin/sh in it)")
    return os.path.realpath(image)


class BwrapThreaded(ThreadedSandbox["BwrapSandbox"]):
    """The sandbox as the loop uses it: commands on the loop, file work in threads."""

    async def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult:
        return await self.blocking.aexec(command, timeout=timeout, cwd=cwd)


class BwrapSandbox:
    def __init__(self, spec: SandboxSpec, options: SandboxOptions) -> None:
        self._spec = spec
        self._options = options
        self._id = uuid.uuid4().hex
        self._uid = sandbox_uid(self._id)
        self._workdir = posixpath.normpath(posixpath.join("/workspace", spec.cwd or "."))
        self._dir: str | None = None
        self._binds: tuple[tuple[str, str], ...] = ()
        self._layout: Layout | None = None
        self._running: set[int] = set()  # process groups of the file work running in threads
        self._launches = Launches(shell_scripts.OUTPUT_LIMIT)  # the commands running now, on the loop
        self._memory: ProcessCgroup | None = None  # holds all its processes to options.memory_mb

    @property
    def workdir(self) -> str:
        return self._workdir

    @property
    def host_dir(self) -> str | None:
        """The host directory holding this sandbox's writable places (None when closed)."""
        return self._dir

    def prepare(self) -> None:
        """Make the sandbox's directory and layout (a few mkdir: done on the loop)."""
        image_root = _image_root(self._spec)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self._spec.run_name)[:24]
        disk_mb = self._options.disk_mb if self._uid is not None else None  # mounting takes root
        self._dir = make_sandbox_dir(f"{DIR_PREFIX}{slug}-", self._options.root, disk_mb)
        self._memory = memory_group(self._id, self._options.memory_mb)
        self._layout = self._make_layout(image_root)

    def _make_layout(self, image_root: str | None) -> Layout:
        assert self._dir is not None
        binds = [
            (os.path.join(self._dir, "workspace"), "/workspace"),
            (os.path.join(self._dir, "tmp"), "/tmp"),
        ]
        if not _inside(self._workdir, WRITABLE):
            _check_mount_point(self._workdir, image_root)
            binds.append((os.path.join(self._dir, "cwd"), self._workdir))
        self._binds = tuple((os.path.realpath(host), inside) for host, inside in binds)
        self._chown(self._dir)
        for host, _inside_dir in self._binds:
            self._makedirs(host)
        self._makedirs(self._host_path(self._workdir) or "")
        return Layout(image_root=image_root, binds=self._binds, workdir=self._workdir)

    async def aclose(self) -> None:
        """End every command of the sandbox (their namespaces gone), then delete its directory."""
        kill_running(self._running)  # file work of threads, if any still runs
        await self._launches.close()
        directory, self._dir = self._dir, None
        if directory is not None:
            await in_thread(remove_tree, directory)
        memory, self._memory = self._memory, None
        if memory is not None:
            await in_thread(memory.remove)

    async def launch(self, script: str, args: list[str], *, timeout: float) -> ProcessOutcome:
        """Run `script` in fresh namespaces from the loop, without a thread (see `launch`)."""
        return await self._launches.run(self._argv_for(script, args), timeout)

    @asynccontextmanager
    async def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> AsyncIterator[SandboxProcess]:
        """A long-running process in a namespace of its own, launched as a command is (from
        the loop, no thread); leaving the block (or closing the sandbox) kills the namespace."""
        target = self._resolve(cwd) if cwd else self._workdir
        async with spawned(self._launches, self._argv_for(SPAWN, spawn_args(target, env, argv))) as process:
            yield process

    def _argv_for(self, script: str, args: list[str]) -> Callable[[int], list[str]]:
        if self._layout is None or self._dir is None:
            raise SandboxError("the sandbox is not open")
        layout, options, nproc, uid = self._layout, self._options, self._nproc(), self._uid
        procs = None if self._memory is None else self._memory.procs
        return lambda info_fd: bwrap_argv(layout, options, nproc, script, args, info_fd, uid, procs)

    def _nproc(self) -> int:
        return self._options.pids_limit + (0 if self._uid is not None else tasks_of(os.getuid()))

    def _launch(self, script: str, args: list[str], *, timeout: float, stdin: bytes = b"") -> ProcessOutcome:
        """`launch` for the file work done in threads: blocking, stdout and stderr apart."""
        if self._layout is None or self._dir is None:
            raise SandboxError("the sandbox is not open")
        procs = None if self._memory is None else self._memory.procs
        argv = bwrap_argv(
            self._layout, self._options, self._nproc(), script, args, user=self._uid, memory_procs=procs
        )
        limit = 2 * shell_scripts.MAX_READ + 2 if script == shell_scripts.READ else shell_scripts.OUTPUT_LIMIT
        return run_process(argv, timeout=timeout, limit=limit, stdin=stdin, running=self._running)

    def interrupt(self) -> None:
        """Kill the file work running now in threads (commands run on the loop: a cancelled
        command kills its own namespace)."""
        kill_running(self._running)

    def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult:
        """A command from a thread (the loop uses `aexec`)."""
        target = self._resolve(cwd) if cwd else self._workdir
        kills = memory_limits.oom_kills(self._memory)
        outcome = self._launch(shell_scripts.COMMAND, [command, target], timeout=timeout)
        result = _exec_result(outcome, (outcome.stderr + outcome.stdout).decode("utf-8", errors="replace"))
        return memory_limits.noted(result, self._memory, kills, self._options.memory_mb)

    async def aexec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult:
        target = self._resolve(cwd) if cwd else self._workdir
        kills = memory_limits.oom_kills(self._memory)
        outcome = await self.launch(shell_scripts.COMMAND, [command, target], timeout=timeout)
        result = _exec_result(outcome, outcome.stdout.decode("utf-8", errors="replace"))
        return memory_limits.noted(result, self._memory, kills, self._options.memory_mb)

    def _resolve(self, path: str) -> str:
        if not path or "\0" in path:
            raise SandboxPathError(f"invalid path {path!r}")
        return posixpath.normpath(posixpath.join(self._workdir, path))

    def _host_path(self, target: str) -> str | None:
        """The host path behind a sandbox path in a writable place, symlinks resolved; None
        when it is elsewhere or a symlink leads out of its place."""
        for host, inside in sorted(self._binds, key=lambda bind: -len(bind[1])):
            if _inside(target, (inside,)):
                real = os.path.realpath(host + target[len(inside) :])
                return real if real == host or real.startswith(host + "/") else None
        return None

    def _place_of(self, target: str) -> tuple[str, str] | None:
        """The host directory of the writable place holding `target`, and the rest of the path."""
        for host, inside in sorted(self._binds, key=lambda bind: -len(bind[1])):
            if _inside(target, (inside,)):
                return host, target[len(inside) :]
        return None

    def read_file(self, path: str) -> bytes:
        target = self._resolve(path)
        place = self._place_of(target)
        if place is not None:
            data = host_files.read_beneath(*place, target)
            if data is not None:
                return data
        # elsewhere, or a symlink leads out of its place: read as the sandbox sees it
        cap = str(shell_scripts.MAX_READ + 1)
        outcome = self._launch(shell_scripts.READ, [target, cap], timeout=shell_scripts.FILE_TIMEOUT)
        _raise_for_file(outcome, target, reading=True)
        return shell_scripts.check_read_size(target, outcome.stdout)

    def write_file(self, path: str, data: bytes) -> None:
        target = self._resolve(path)
        place = self._place_of(target)
        if place is None:
            places = ", ".join(inside for _host, inside in self._binds)
            raise SandboxPathError(f"{target} is on the sandbox's read-only root; write under {places}")
        if not host_files.write_beneath(*place, data, target=target, owner=self._uid):
            # a symlink in a writable place points elsewhere: let the sandbox resolve it
            outcome = self._launch(
                shell_scripts.WRITE, [target], timeout=shell_scripts.FILE_TIMEOUT, stdin=data
            )
            _raise_for_file(outcome, target, reading=False)

    def _makedirs(self, host: str) -> None:
        missing = []
        while host and not os.path.isdir(host):
            missing.append(host)
            host = os.path.dirname(host)
        for directory in reversed(missing):
            os.mkdir(directory, 0o755)
            self._chown(directory)

    def _chown(self, path: str) -> None:
        if self._uid is not None:
            os.chown(path, self._uid, self._uid)


def _exec_result(outcome: ProcessOutcome, output: str) -> ExecResult:
    if outcome.timed_out:
        return ExecResult(output, 124, timed_out=True)
    return ExecResult(output, outcome.exit_code)


def _inside(path: str, places: tuple[str, ...]) -> bool:
    return any(path == place or path.startswith(place + "/") for place in places)


def _check_mount_point(workdir: str, image_root: str | None) -> None:
    """A cwd outside /workspace and /tmp becomes a bind; its mount point must be creatable."""
    top = "/" + workdir.split("/")[1]
    read_only = {arg for arg in root_mounts(image_root) if arg.startswith("/")} | {"/proc", "/dev"}
    source = workdir if image_root is None else image_root + workdir
    if any(_inside(top, (entry,)) for entry in read_only) and not os.path.isdir(source):
        raise SandboxPathError(
            f"cwd {workdir} lies in the sandbox's read-only root; use a path under /workspace"
        )


def _raise_for_file(outcome: ProcessOutcome, path: str, *, reading: bool) -> None:
    shell_scripts.raise_for_file(
        path, outcome.exit_code, outcome.stderr, timed_out=outcome.timed_out, reading=reading
    )
