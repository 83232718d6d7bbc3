"""One sandboxed command run from the event loop, without a thread: bwrap is started from the
loop, its output and exit are watched by the loop, and its pid namespace is followed to its end.

bwrap's exit does not mean that the namespace is gone. Its pid 1 (bwrap's init) reports the
command's exit and bwrap leaves at once; pid 1, killed by its parent-death signal, then tears
the namespace down (a fork bomb's hundreds of processes take a while) while nobody waits, and
ends as a zombie of whoever adopts it (issue 20: a process of the sandbox's user outlived the
run). So bwrap tells us pid 1's host pid (`--info-fd`), and a launch ends only once pid 1 is
dead: SIGKILL to it (through a pidfd, so never to a reused pid) kills every process of the
namespace, and the kernel reports pid 1's death only after all of them are gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

from agent.errors import SandboxError
from agent.protocols import SandboxProcess
from agent.sandboxes.blocking import to_the_end
from agent.sandboxes.host.output_buffer import OutputBuffer
from agent.sandboxes.host.pipe_process import PipeProcess
from agent.sandboxes.host.process_output import on_output, read_ready
from agent.sandboxes.host.sandbox_process import DEFAULT_PATH, ProcessOutcome

NAMESPACE_END_WAIT = 10.0  # seconds for a SIGKILLed namespace to be gone (a task in D state is slow)
BWRAP_EXIT_WAIT = 2.0  # seconds for bwrap to exit once its pid 1 was killed
INFO_LIMIT = 1 << 16


class Launch:
    """One bwrap process and its namespace. `start` it, `wait` for it; `kill` (any thread-free
    caller, any time) ends it at once, and `finish` waits until nothing of it is left."""

    def __init__(self, argv_for: Callable[[int], list[str]], limit: int, *, piped: bool = False) -> None:
        """`piped`: a long-running process (spawn) whose three pipes belong to the caller."""
        info_read, info_write = os.pipe2(os.O_CLOEXEC)
        try:
            self.proc = subprocess.Popen(
                argv_for(info_write),
                stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if piped else subprocess.STDOUT,
                env={"PATH": os.environ.get("PATH") or DEFAULT_PATH},
                start_new_session=True,  # its own process group: a kill reaches all of the launcher
                pass_fds=(info_write,),
            )  # no user=: it forks the worker (170 ms for 300 MB) where vfork takes 1 ms
        except BaseException:
            os.close(info_read)
            raise
        finally:
            os.close(info_write)
        self._info_fd = info_read
        self._info = b""
        self._init_fd: int | None = None  # pidfd of the namespace's pid 1, once bwrap told it
        self._exit_fd = os.pidfd_open(self.proc.pid)
        self.output = OutputBuffer(limit)
        self._done = False
        self._piped = piped
        self._finishing: asyncio.Future[None] | None = None

    async def follow(self) -> None:
        """Learn the namespace's pid 1 from bwrap (for `kill`), without waiting for the exit:
        a spawned process runs on; `wait` does this itself."""
        loop = asyncio.get_running_loop()
        info_done: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self._info_fd, self._read_info, loop, info_done)
        try:
            await asyncio.wait([info_done], timeout=NAMESPACE_END_WAIT)
        finally:
            loop.remove_reader(self._info_fd)

    async def wait(self, timeout: float) -> ProcessOutcome:
        """Run to the command's exit or `timeout`, then end the namespace and wait for it; a
        cancellation kills it at once (`finish` then waits for what remains)."""
        loop = asyncio.get_running_loop()
        assert self.proc.stdout is not None
        out_fd = self.proc.stdout.fileno()
        os.set_blocking(out_fd, False)
        info_done, exited = loop.create_future(), loop.create_future()
        loop.add_reader(out_fd, on_output, loop, out_fd, self.output)
        loop.add_reader(self._info_fd, self._read_info, loop, info_done)
        loop.add_reader(self._exit_fd, _settle, loop, self._exit_fd, exited)
        try:
            try:
                async with asyncio.timeout(timeout):
                    await exited
                timed_out = False
            except TimeoutError:
                timed_out = True
            await asyncio.wait([info_done], timeout=NAMESPACE_END_WAIT)
        except BaseException:
            self.kill()  # at once; then wait, despite more cancellations, until it is gone
            self._unwatch(loop, out_fd)
            await to_the_end(asyncio.ensure_future(self.finish()))
            raise
        self._unwatch(loop, out_fd)
        await self.finish()
        code = self.proc.returncode
        exit_code = 128 - code if code < 0 else code
        return ProcessOutcome(self.output.getvalue(), b"", exit_code, timed_out)

    def _unwatch(self, loop: asyncio.AbstractEventLoop, out_fd: int) -> None:
        for fd in (out_fd, self._info_fd, self._exit_fd):
            loop.remove_reader(fd)

    def _read_info(self, loop: asyncio.AbstractEventLoop, done: asyncio.Future[None]) -> None:
        """bwrap writes its child's pid, then closes the descriptor: read until EOF."""
        try:
            chunk = os.read(self._info_fd, 4096)
        except BlockingIOError:
            return
        self._info += chunk
        if chunk and len(self._info) < INFO_LIMIT:
            return
        loop.remove_reader(self._info_fd)
        self._init_fd = _namespace_init(self._info)
        if not done.done():
            done.set_result(None)

    def kill(self) -> None:
        """SIGKILL the namespace's pid 1, so that every process of it dies and bwrap, which
        reaps pid 1, exits (no zombie is left to the host's init); before bwrap has said which
        pid that is, SIGKILL the launcher's group. No waiting: `finish` does that."""
        if self._done:
            return
        if self._init_fd is not None:
            with suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(self._init_fd, signal.SIGKILL)
        else:
            self._kill_launcher()

    def _kill_launcher(self) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def finish(self) -> None:
        """Kill what is left and wait until the namespace and bwrap are gone, then release
        the descriptors. Safe to call again, also while another call waits (the sandbox
        closing while a spawned process's block is left)."""
        if self._finishing is None:
            self._finishing = asyncio.ensure_future(self._finish())
        await asyncio.shield(self._finishing)

    async def _finish(self) -> None:
        if self._done:
            return
        self.kill()  # the command has ended (or must): what still runs in its namespace must not
        if not await _readable(self._exit_fd, BWRAP_EXIT_WAIT):
            self._kill_launcher()  # its pid 1 then dies of its parent-death signal
            await _readable(self._exit_fd, NAMESPACE_END_WAIT)
        if self._init_fd is not None:
            await _readable(self._init_fd, NAMESPACE_END_WAIT)
        self._done = True
        self.proc.wait()  # exited (or SIGKILLed): at once
        assert self.proc.stdout is not None
        if not self._piped:  # a spawned process's pipes are its caller's
            read_ready(self.proc.stdout.fileno(), self.output)  # every writer is gone: the rest
            self.proc.stdout.close()
        for fd in (self._info_fd, self._exit_fd, self._init_fd):
            if fd is not None:
                os.close(fd)


def _namespace_init(info: bytes) -> int | None:
    """A pidfd of the namespace's pid 1 that bwrap's info names, checked to be that process
    (its pid namespace is the one bwrap made); None when it is already gone or unnamed."""
    try:
        fields = json.loads(info)
        pid, namespace = int(fields["child-pid"]), int(fields["pid-namespace"])
        fd = os.pidfd_open(pid)
    except (ValueError, KeyError, TypeError, OSError):
        return None  # bwrap failed before it made the namespace, or pid 1 already died
    try:
        same = os.stat(f"/proc/{pid}/ns/pid").st_ino == namespace
    except OSError:
        same = False
    if not same:  # pid 1 died and its pid went to another process before we opened it
        os.close(fd)
        return None
    return fd


def _settle(loop: asyncio.AbstractEventLoop, fd: int, future: asyncio.Future[None]) -> None:
    loop.remove_reader(fd)  # a pidfd stays readable once its process has exited
    if not future.done():
        future.set_result(None)


async def _readable(fd: int, timeout: float) -> bool:
    """Wait until the pidfd `fd` says its process ended (at most `timeout` s)."""
    loop = asyncio.get_running_loop()
    ended = loop.create_future()
    loop.add_reader(fd, _settle, loop, fd, ended)
    try:
        await asyncio.wait([ended], timeout=timeout)
    finally:
        loop.remove_reader(fd)
    return ended.done()


class Launches:
    """The commands of one sandbox running now: `run` one; `close` ends them all and refuses more."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._running: set[Launch] = set()
        self._closed = False

    async def run(self, argv_for: Callable[[int], list[str]], timeout: float) -> ProcessOutcome:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        launch = Launch(argv_for, self._limit)
        self._running.add(launch)
        try:
            return await launch.wait(timeout)
        finally:
            self._running.discard(launch)

    def start(self, argv_for: Callable[[int], list[str]]) -> Launch:
        """A long-running process with pipes (spawn), counted as running until `end`."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        launch = Launch(argv_for, self._limit, piped=True)
        self._running.add(launch)
        return launch

    async def end(self, launch: Launch) -> None:
        """End a process of `start` and its namespace, and wait until nothing of it is left."""
        try:
            await launch.finish()
        finally:
            self._running.discard(launch)

    async def close(self) -> None:
        self._closed = True
        for launch in list(self._running):
            launch.kill()
        for launch in list(self._running):
            await launch.finish()


@asynccontextmanager
async def spawned(launches: Launches, argv_for: Callable[[int], list[str]]) -> AsyncIterator[SandboxProcess]:
    """A long-running process of `launches` (see `Launches.start`) as a SandboxProcess, its
    namespace killed and waited for when the block is left, however it is left."""
    launch = launches.start(argv_for)
    process = PipeProcess(launch.proc)
    try:
        await process.started()
        await launch.follow()
        yield process
    finally:
        await to_the_end(asyncio.ensure_future(_end(launches, launch, process)))


async def _end(launches: Launches, launch: Launch, process: PipeProcess) -> None:
    try:
        await launches.end(launch)
    finally:
        process.close()
