"""A long-running host process with pipes, driven from the event loop without a thread: what
`Sandbox.spawn` yields for the local and bwrap backends (`agent.protocols.SandboxProcess`).

Started by SPAWN (shell_scripts), whose first stdout line is its pid or why it cannot start.
stderr is drained by the loop all along into a small tail, so a chatty program never blocks
on it; stdout is read only when asked (back-pressure); stdin is written as the pipe takes it.
Every wait is a reader or writer on the loop removed when the wait ends, so a cancelled
`send` or `receive` leaves nothing behind (a message may be half written: the stream is then
the caller's to abandon). Killing is the backend's (`close` only releases the descriptors).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Awaitable, Callable
from contextlib import suppress

from agent.errors import SandboxError

CHUNK = 64 * 1024  # receive returns at most this much
STDERR_TAIL = 4096  # bytes of stderr kept
START_TIMEOUT = 30.0  # seconds for the handshake line
HANDSHAKE_LIMIT = 4096
EXIT_AFTER_EOF = 1.0  # seconds receive waits at EOF for the exit (a child may hold stdout longer)
Waited = asyncio.Future[None]


class PipeProcess:
    """`proc` (stdin, stdout and stderr pipes) as a SandboxProcess."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self._loop = asyncio.get_running_loop()
        self._in, self._out, self._err = proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno()
        for fd in (self._in, self._out, self._err):
            os.set_blocking(fd, False)
        self._tail = bytearray()
        self._pending = b""  # stdout read with the handshake line
        self._closed = False
        self._exit_fd = os.pidfd_open(proc.pid)
        self._exited: asyncio.Future[None] = self._loop.create_future()
        self._gone: asyncio.Future[None] = self._loop.create_future()  # set by `close`
        self._loop.add_reader(self._err, self._drain_stderr)
        self._loop.add_reader(self._exit_fd, self._on_exit)

    async def started(self) -> None:
        """Wait for the handshake; SandboxError saying why when the program cannot start."""
        _pid, self._pending = await handshake(self._read, self.stderr_tail)

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._closed or self._exited.done():  # (the block was left, or it exited)
                raise SandboxError(f"the process has ended (exit status {self.returncode})")
            try:
                view = view[os.write(self._in, view[:CHUNK]) :]
            except BlockingIOError:
                await self._wait(self._loop.add_writer, self._loop.remove_writer, self._in, self._exited)
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise SandboxError("the process has closed its stdin") from exc

    async def receive(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending[:CHUNK], self._pending[CHUNK:]
            return data
        data = await self._read()
        if not data:  # its exit comes a moment after the EOF: let returncode tell it
            await asyncio.wait([self._exited], timeout=EXIT_AFTER_EOF)
        return data

    async def _read(self) -> bytes:
        while True:
            if self._closed:
                raise SandboxError("the process's block was left")
            try:
                return os.read(self._out, CHUNK)
            except BlockingIOError:
                await self._wait(self._loop.add_reader, self._loop.remove_reader, self._out)

    async def _wait(
        self,
        add: Callable[..., object],
        remove: Callable[[int], object],
        fd: int,
        *also: asyncio.Future[None],
    ) -> None:
        """Until `fd` is ready or one of `also` is done (a write waits for the exit too: a
        launcher that outlives the program may hold its stdin open)."""
        ready: asyncio.Future[None] = self._loop.create_future()
        add(fd, _settle, ready)
        try:
            await asyncio.wait([ready, self._gone, *also], return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not self._closed:  # else `close` removed it: the number may be another's by now
                remove(fd)
            ready.cancel()

    @property
    def returncode(self) -> int | None:
        code = self.proc.poll() if self._exited.done() else None
        return None if code is None else 128 - code if code < 0 else code

    def stderr_tail(self) -> str:
        return bytes(self._tail).decode(errors="replace")

    def _drain_stderr(self) -> None:
        try:
            chunk = os.read(self._err, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._loop.remove_reader(self._err)
            return
        self._tail += chunk
        del self._tail[: max(0, len(self._tail) - STDERR_TAIL)]

    def _on_exit(self) -> None:
        self._loop.remove_reader(self._exit_fd)  # a pidfd stays readable once its process exited
        if not self._exited.done():
            self._exited.set_result(None)

    def close(self) -> None:
        """Release the descriptors (the process must be dead or be killed by the caller)."""
        if self._closed:
            return
        self._closed = True
        for fd in (self._err, self._exit_fd, self._out):
            self._loop.remove_reader(fd)
        self._loop.remove_writer(self._in)
        _settle(self._gone)  # wakes a send or receive waiting in another task
        os.close(self._exit_fd)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with suppress(OSError):  # stdin with unwritten data
                if stream is not None:
                    stream.close()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def handshake(
    read: Callable[[], Awaitable[bytes]], stderr_tail: Callable[[], str]
) -> tuple[int, bytes]:
    """SPAWN's first stdout line read with `read`: the program's pid and what followed it;
    SandboxError saying why when the program cannot start."""
    line = b""
    try:
        async with asyncio.timeout(START_TIMEOUT):
            while b"\n" not in line and len(line) < HANDSHAKE_LIMIT:
                chunk = await read()
                if not chunk:
                    break
                line += chunk
    except TimeoutError:
        raise SandboxError(f"the process did not start within {START_TIMEOUT:.0f} s") from None
    first, _, rest = line.partition(b"\n")
    if not first.strip().isdigit():
        why = first.decode(errors="replace").strip() or f"it exited at once; stderr: {stderr_tail()}"
        raise SandboxError(f"cannot start the process: {why}")
    return int(first), rest
