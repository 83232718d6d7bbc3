"""A long-running process in a container (`Sandbox.spawn`): an exec with stdin kept open on the
engine's hijacked connection, whose output comes as the 8-byte-header frames of a non-tty exec.

One thread of its own (`blocking.own_thread`) reads the connection all along: stderr frames go
to a small tail at once, so a chatty program never blocks on it; stdout frames to a bounded
queue the loop's `receive` takes from (when it is full the thread waits: back-pressure, up to
QUEUE_CHUNKS x 64 KiB read ahead). Writes go from the loop (the socket is non-blocking), so a
cancelled `send` never leaves a thread stuck on a program that does not read. Leaving the
block kills the process's session and process group inside the container (`stop_command`,
which restarts the container when no kill can run), then ends the thread. The handshakes
are container_exec's GO line and SPAWN's pid line (its pid is what the kill targets).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import select
import socket
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from agent.errors import SandboxError
from agent.protocols import SandboxProcess
from agent.sandboxes.blocking import in_thread, outlast, own_thread, to_the_end
from agent.sandboxes.docker.container_exec import FRAME_HEADER, GO, exec_exit_code, stop_command
from agent.sandboxes.docker.engine import ENGINE_ERRORS, short_error
from agent.sandboxes.host.pipe_process import CHUNK, STDERR_TAIL, handshake
from agent.sandboxes.shell_scripts import SPAWN

log = logging.getLogger(__name__)
QUEUE_CHUNKS = 64
POLL = 0.2  # seconds between the reader thread's looks at whether it must stop
GONE_EXIT = 137  # the exit status told when the exec cannot be inspected (its container went)


class ExecProcess:
    """One exec's stream as a SandboxProcess; made by `spawned`."""

    def __init__(self, client: Any, exec_id: str, sock: Any) -> None:
        self._client, self._exec_id, self.sock = client, exec_id, sock
        self.conn: socket.socket = getattr(sock, "_sock", sock)
        self._loop = asyncio.get_running_loop()
        self._chunks: queue.Queue[bytes] = queue.Queue(QUEUE_CHUNKS)
        self._ready = asyncio.Event()
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._stopping = False
        self._ended = False  # the stream ended (b"" was queued)
        self._returncode: int | None = None
        self._pending = b""
        self.pid = -1

    # ------------------------------------------------------------ the loop's side

    async def started(self) -> None:
        self.pid, self._pending = await handshake(self._take, self.stderr_tail)

    async def send(self, data: bytes) -> None:
        if self._stopping or self._ended:
            raise SandboxError(f"the process has ended (exit status {self._returncode})")
        try:
            await self._loop.sock_sendall(self.conn, data)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise SandboxError("the process has closed its stdin") from exc

    async def receive(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending[:CHUNK], self._pending[CHUNK:]
            return data
        return await self._take()

    async def _take(self) -> bytes:
        while True:
            if self._stopping:  # the block was left: whatever is queued is nobody's
                raise SandboxError("the process's block was left")
            try:
                chunk = self._chunks.get_nowait()
            except queue.Empty:
                if self._stopping:
                    raise SandboxError("the process's block was left") from None
                self._ready.clear()
                if self._chunks.empty():  # a put between get and clear set it again after
                    await self._ready.wait()
                continue
            if not chunk:
                self._chunks.put_nowait(b"")  # EOF stays EOF for the next call
            return chunk

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def stderr_tail(self) -> str:
        with self._lock:
            return bytes(self._tail).decode(errors="replace")

    # ------------------------------------------------------------ the reader thread

    def pump(self) -> None:
        """Read frames until the stream ends or `_stopping`; then the exit status and EOF."""
        pending = b""
        poller = select.poll()
        poller.register(self.conn.fileno(), select.POLLIN)
        while not self._stopping:
            if not poller.poll(POLL * 1000):
                continue
            try:
                chunk = self.conn.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                break
            pending = self._frames(pending + chunk)
        self._returncode = self._exit_status()
        self._ended = True
        self._put(b"")

    def _frames(self, data: bytes) -> bytes:
        """Hand on the whole frames in `data`; returns the rest."""
        while len(data) >= FRAME_HEADER.size:
            stream, size = FRAME_HEADER.unpack_from(data)
            if len(data) < FRAME_HEADER.size + size:
                break
            payload, data = (
                data[FRAME_HEADER.size : FRAME_HEADER.size + size],
                data[FRAME_HEADER.size + size :],
            )
            if stream == 2:
                with self._lock:
                    self._tail += payload
                    del self._tail[: max(0, len(self._tail) - STDERR_TAIL)]
            elif stream == 1:
                for offset in range(0, len(payload), CHUNK):
                    self._put(payload[offset : offset + CHUNK])
        return data

    def _put(self, chunk: bytes) -> None:
        while True:
            if self._stopping:  # nobody will read it
                return
            try:
                self._chunks.put(chunk, timeout=POLL)
                break
            except queue.Full:
                continue
        with suppress(RuntimeError):  # the loop is closed: nobody reads any more
            self._loop.call_soon_threadsafe(self._ready.set)

    def _exit_status(self) -> int:
        try:
            code = exec_exit_code(self._client, self._exec_id)
        except ENGINE_ERRORS:
            return GONE_EXIT
        return GONE_EXIT if code < 0 else code

    def wake(self) -> None:
        """Wake a `receive` waiting in another task (it then sees the block left)."""
        self._ready.set()

    def stop(self) -> None:
        """Make the reader thread end soon (a thread; the process must be killed already)."""
        self._stopping = True
        with suppress(OSError):
            self.conn.shutdown(socket.SHUT_RDWR)


def _start(client: Any, container_id: str, args: list[str]) -> tuple[str, Any]:
    """The exec (its GO handshake answered): its id and its connection."""
    argv = ["/bin/sh", "-c", GO + SPAWN, "sh", *args]
    exec_id = client.api.exec_create(container_id, argv, stdin=True, workdir="/")["Id"]
    sock = client.api.exec_start(exec_id, socket=True)
    getattr(sock, "_sock", sock).sendall(b"\n")
    return str(exec_id), sock


@asynccontextmanager
async def spawned(
    client: Any, container_id: Callable[[], str], args: list[str]
) -> AsyncIterator[SandboxProcess]:
    """SPAWN with `args` in the container `container_id()` names (it blocks: called in a thread)."""

    def start() -> tuple[str, Any]:
        try:
            return _start(client, container_id(), args)
        except ENGINE_ERRORS as exc:
            raise SandboxError(f"cannot start the process: {short_error(exc)}") from exc

    starting = own_thread(start)
    try:
        exec_id, sock = await to_the_end(starting)
    except asyncio.CancelledError:
        if not starting.cancelled() and starting.exception() is None:
            _close(starting.result()[1])  # its stdin ends; the container's end kills the rest
        raise
    process = ExecProcess(client, exec_id, sock)
    process.conn.setblocking(False)  # writes go from the loop; the thread polls before reading
    reading = own_thread(process.pump)
    try:
        await process.started()
        yield process
    finally:
        await to_the_end(asyncio.ensure_future(_end(client, container_id, process, reading)))


async def _end(
    client: Any, container_id: Callable[[], str], process: ExecProcess, reading: asyncio.Future[None]
) -> None:
    try:
        if process.pid > 1:  # its children may outlive it: kill its session whatever it did
            await in_thread(_kill, client, container_id, process.pid)
    finally:
        process.stop()
        await outlast(reading)
        process.wake()
        _close(process.sock)


def _close(sock: Any) -> None:
    """Close the exec's connection: the socket under docker-py's SocketIO too."""
    getattr(sock, "_sock", sock).close()
    sock.close()


def _kill(client: Any, container_id: Callable[[], str], pid: int) -> None:
    try:
        stop_command(client, container_id(), pid)
    except (SandboxError, OSError, *ENGINE_ERRORS) as exc:  # the container is gone: so is the process
        log.debug("could not kill a spawned process: %s", short_error(exc))
