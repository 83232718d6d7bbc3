"""The `local` sandbox backend: a private host directory per prompt, commands run by host bash.

A sandbox is a slot of a `SlotPool` (see `local_slots` for the layout and why slots are reused):
`workspace/` is the default cwd, `home/` is HOME, `tmp/` is TMPDIR. Leaving `open_sandbox`'s
block kills the sandbox's processes and deletes the slot; a run's workers share one pool per
process (`open_pool`), so a slot is emptied and handed to the next prompt.

Everything runs on the event loop without a thread where it is cheap: commands (the loop
watches their output and exit), taking a free slot, small files and emptying a slot that holds
a few files. Killing what a sandbox left running, deleting a tree and big files go to a thread.

This backend isolates files and environment variables, not the host: commands run as the
runner's user with the host's filesystem visible. The file tools stay inside the sandbox dir
even against its commands swapping directories for symlinks meanwhile (every lookup is held
beneath the slot by the kernel, see host/safe_paths). The model sees the slot as "/", never
its host path (see view; a spawned process too: viewed_process). What it does guarantee is that
nothing of a prompt outlives it where a cgroup tracks its processes (see `tracking`): every
process killed, every mount under its directory detached, the directory emptied or deleted.
Memory: a slot's processes together are held to `memory_mb` by a memory cgroup where one works
(host.memory_limits; an OOM kill is told in the command's result), else each by an rlimit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType

from agent.errors import SandboxError, SandboxPathError, SandboxUnavailable
from agent.protocols import ExecResult, Sandbox, SandboxFactory, SandboxOptions, SandboxProcess, SandboxSpec
from agent.sandboxes.blocking import in_thread, to_the_end
from agent.sandboxes.host import memory_limits
from agent.sandboxes.host.cgroups import ProcessCgroup
from agent.sandboxes.host.pipe_process import PipeProcess
from agent.sandboxes.host.process_groups import ProcessGroups, kill_groups
from agent.sandboxes.host.safe_paths import DIR_PATH, escapes, open_beneath
from agent.sandboxes.local.environment import passed_env, scrubbed_env
from agent.sandboxes.local.file_io import check_readable, write_beneath
from agent.sandboxes.local.slots import SlotPool
from agent.sandboxes.local.view import view_of
from agent.sandboxes.local.viewed_process import ViewedProcess
from agent.sandboxes.shell_scripts import SPAWN, spawn_args

LOOP_IO_BYTES = 1 << 20  # files up to this size are read and written on the event loop
NO_BASH = "bash was not found on PATH; install bash to use the local backend"
SHOWN_PLACES = "/workspace, /tmp or /home"


def default_root() -> str:
    return os.path.join(tempfile.gettempdir(), "agent-sandboxes")


def unavailable_reason(options: SandboxOptions) -> str | None:
    if shutil.which("bash") is None:
        return NO_BASH
    return None


@asynccontextmanager
async def open_sandbox(spec: SandboxSpec, options: SandboxOptions) -> AsyncIterator[LocalSandbox]:
    """A fresh sandbox for `spec`, in a pool of its own; leaving the block kills its processes
    and deletes it."""
    pool = SlotPool(options.root or default_root(), spec.run_name, spec.prompt_key, options.memory_mb)
    with pool:  # made on the loop (a marker and a directory); deleted in a thread
        try:
            async with Session(spec, pool, shutil.which("bash"), options.memory_mb, passed_env()) as sandbox:
                yield sandbox
        except BaseException:
            await in_thread(pool.close, strict=False)  # never mask what is propagating
            raise
        await in_thread(pool.close)


@asynccontextmanager
async def open_pool(options: SandboxOptions, run_name: str) -> AsyncIterator[SandboxFactory]:
    """A factory for all of a run's sandboxes in this process: each is a slot of one pool,
    emptied and reused after its prompt. Leaving the block deletes the pool."""
    bash = shutil.which("bash")
    passed = passed_env()  # once per pool: scanning os.environ per prompt cost ~2 % of a worker's CPU
    with SlotPool(options.root or default_root(), run_name, f"w{os.getpid()}", options.memory_mb) as pool:

        def factory(spec: SandboxSpec) -> AbstractAsyncContextManager[Sandbox]:
            return Session(spec, pool, bash, options.memory_mb, passed)

        yield factory


class Session(AbstractAsyncContextManager[Sandbox]):
    """One prompt's sandbox on a slot of `pool`. Opening (taking a free slot) is quick and
    stays on the loop; so does closing unless it has processes to kill or a big tree to delete."""

    def __init__(
        self, spec: SandboxSpec, pool: SlotPool, bash: str | None, memory_mb: int, passed: Mapping[str, str]
    ) -> None:
        self._spec, self._pool, self._bash, self._passed = spec, pool, bash, passed
        self._memory_mb = memory_mb  # asked for; the pool's memory cgroup holds it where one works
        self._sandbox: LocalSandbox | None = None

    async def __aenter__(self) -> LocalSandbox:
        if self._bash is None:
            raise SandboxUnavailable(NO_BASH)
        sandbox = LocalSandbox(self._pool, self._pool.acquire(), self._bash, self._memory_mb, self._passed)
        try:
            sandbox._workdir = sandbox._make_workdir(self._spec.cwd)
        except BaseException:
            sandbox.close(strict=False)  # never let a cleanup failure mask what is propagating
            raise
        self._sandbox = sandbox
        return sandbox

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._sandbox is not None:
            await self._sandbox.aclose(strict=kind is None)


class LocalSandbox:
    """A prompt's private directory on the host. Create it with `open_sandbox` or `open_pool`."""

    def __init__(
        self,
        pool: SlotPool,
        slot: str,
        bash: str,
        memory_mb: int = 0,
        passed: Mapping[str, str] | None = None,
    ) -> None:
        self.root = slot  # realpath of the sandbox dir; every file path must stay under it
        self._pool = pool
        self._workdir = os.path.join(slot, "workspace")
        group, self._memory = pool.groups(slot)
        self._group = group
        # no memory cgroup here: each process is held to the limit by RLIMIT_AS instead
        rlimit = memory_mb > 0 and self._memory is None and shutil.which("prlimit") is not None
        self._bash = [*(["prlimit", f"--as={memory_mb << 20}", "--"] if rlimit else []), bash]
        passed = passed_env() if passed is None else passed
        self._env = {**scrubbed_env(slot, bash, passed), **pool.join_env(group, self._memory)}
        self._processes = ProcessGroups(slot, group)
        self._closed = False
        self._view = view_of(slot)
        # Every file lookup starts here, held beneath it by the kernel (safe_paths): the slot's
        # path itself may be renamed by the sandbox's commands, this descriptor stays its own.
        self._root_fd = os.open(slot, DIR_PATH | os.O_NOFOLLOW)

    @property
    def workdir(self) -> str:
        return self._workdir

    # ------------------------------------------------------------ commands

    async def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult:
        """Run `bash -c command` in its own process group, from the event loop without a thread;
        on timeout or cancellation kill the whole group."""
        directory = self._workdir if cwd is None else self._existing_dir(cwd)
        argv = [*self._bash, "-c", self._view.on_host(command)]
        oom = self._pool.oom_counter(self.root)
        kills = 0 if oom is None else oom.kills()
        result = await self._processes.arun(argv, cwd=directory, env=self._env, timeout=timeout)
        result = dataclasses.replace(result, output=self._view.shown(result.output))
        if oom is None or oom.kills() <= kills:
            return result
        return memory_limits.noted(result, self._memory, kills, self._pool.memory_mb)

    # ------------------------------------------------------------ files

    def resolve_path(self, path: str) -> str:
        """The host path for `path` (relative to workdir; /workspace/x, /tmp/x as the sandbox
        shows them), symlinks resolved; SandboxPathError outside the sandbox."""
        if self._closed:  # its slot may belong to another prompt by now
            raise SandboxError("the sandbox is closed")
        real = os.path.realpath(self._view.host_path(path, self._workdir))
        if real != self.root and not real.startswith(self.root + os.sep):
            raise SandboxPathError(f"{path}: outside the sandbox (paths must stay under {SHOWN_PLACES})")
        return real

    def _open(self, path: str, flags: int, mode: int = 0) -> int:
        """`path` opened beneath the slot: whatever the sandbox's commands rename meanwhile,
        no component (symlinks included) leads out of it."""
        relative = os.path.relpath(self.resolve_path(path), self.root)
        try:
            return open_beneath(self._root_fd, relative, flags, mode)
        except OSError as exc:
            if escapes(exc):
                raise SandboxPathError(f"{path}: leads outside the sandbox") from None
            raise OSError(exc.errno, exc.strerror, path) from None

    async def read_file(self, path: str) -> bytes:
        fd = self._open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang us
        with os.fdopen(fd, "rb") as handle:
            small = check_readable(os.fstat(fd), path) <= LOOP_IO_BYTES
            return handle.read() if small else await in_thread(handle.read)

    async def write_file(self, path: str, data: bytes) -> None:
        relative = os.path.relpath(self.resolve_path(path), self.root)
        if len(data) <= LOOP_IO_BYTES:
            write_beneath(self._root_fd, relative, data, path)
        else:
            await in_thread(write_beneath, self._root_fd, relative, data, path)

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> AbstractAsyncContextManager[SandboxProcess]:
        """A long-running process in the sandbox (`agent.protocols.SandboxProcess`): run like a
        command (the slot's memory group or rlimit, the scrubbed environment plus `env`) in a
        cgroup of its own below the slot's (cgroup v2; else its process group), which leaving
        the block kills whole; closing the sandbox kills the slot's group, it included."""
        return self._spawned(argv, env or {}, cwd)

    @asynccontextmanager
    async def _spawned(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None
    ) -> AsyncIterator[SandboxProcess]:
        try:
            directory = self._workdir if cwd is None else self._existing_dir(cwd)
        except FileNotFoundError:
            raise SandboxError(f"no such directory: {cwd}") from None
        on_host = self._view.on_host
        args = spawn_args(directory, {k: on_host(v) for k, v in env.items()}, [on_host(a) for a in argv])
        own = self._own_group()
        joins = self._pool.join_env(own, self._memory) if own is not None else {}
        argv = [*self._bash, "-c", SPAWN, "spawn", *args]
        try:
            process = PipeProcess(self._processes.start(argv, cwd=self.root, env={**self._env, **joins}))
        except BaseException:
            if own is not None:
                await in_thread(own.remove)
            raise
        try:
            await process.started()
            yield ViewedProcess(process, self._view)
        finally:
            await to_the_end(asyncio.ensure_future(self._end(process, own)))

    def _own_group(self) -> ProcessCgroup | None:
        """A group below the slot's, whose kill takes what left the process's session; v2
        only: there a group's kill and emptiness take in the groups below it, so the slot's
        close and reuse stay right."""
        if self._group is None or self._group.hierarchy.kind != "cgroup2":
            return None
        return self._group.child(f"spawn-{secrets.token_hex(6)}").make()

    async def _end(self, process: PipeProcess, own: ProcessCgroup | None) -> None:
        """Kill the process's cgroup, or its process group (its pid is not reaped yet: the
        group id is still ours)."""
        if own is None or not await in_thread(own.remove):
            await in_thread(kill_groups, [process.proc.pid])
        process.close()
        self._processes.reap(process.proc)

    # ------------------------------------------------------------ lifecycle

    def close(self, *, strict: bool = True) -> None:
        """Kill every process the sandbox started, then empty its slot for the next prompt."""
        if self._closed:
            return
        self._closed = True
        os.close(self._root_fd)
        dead = self._processes.close()  # a process that would not die: the slot is not reused
        self._pool.release(self.root, strict=strict, reusable=dead)

    async def aclose(self, *, strict: bool = True) -> None:
        """`close` from the event loop: done on the loop when no process is left and the slot
        holds a few files at most; killing (which waits for deaths) and deleting a tree go to a thread."""
        if self._closed:
            return
        if not self._processes.close_if_idle():
            await in_thread(self.close, strict=strict)
            return
        self._closed = True
        os.close(self._root_fd)
        if not self._pool.release_small(self.root):
            await in_thread(self._pool.release, self.root, strict=strict)

    def _make_workdir(self, cwd: str | None) -> str:
        if not cwd:
            return os.path.join(self.root, "workspace")
        # The sandbox dir stands for the sandbox's "/", as in bwrap and docker: "/app" is
        # <root>/app, a relative "src" is /workspace/src.
        inside = cwd.lstrip("/") if cwd.startswith("/") else os.path.join("workspace", cwd)
        target = os.path.realpath(os.path.join(self.root, inside))
        if target != self.root and not target.startswith(self.root + os.sep):
            raise SandboxPathError(f"cwd {cwd!r} leaves the sandbox")
        if cwd.startswith("/"):
            self._view = view_of(self.root, cwd_top=os.path.normpath(cwd).split("/")[1] or None)
        os.makedirs(target, exist_ok=True)
        return target

    def _existing_dir(self, cwd: str) -> str:
        real = self.resolve_path(cwd)
        if not os.path.isdir(real):
            raise FileNotFoundError(errno.ENOENT, "No such directory", cwd)
        return real
