"""How a session reaches its server, as the SDK's stream pair: a stdio server in a sandbox
(`Sandbox.spawn`, fed through newline-delimited JSON-RPC by `process_streams`), on the host
(the SDK's `stdio_client`), or over streamable HTTP (the SDK's client, the URL's host checked
by the network policy first). Each `Launch` is entered and left by the session's owner task
(`tools.mcp.connection`); `stderr_tail` says what the server last wrote to its stderr."""

from __future__ import annotations

import os
import posixpath
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import anyio
import httpx2
import mcp_types
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from agent.common.network_policy import NetworkPolicy, PolicyRefusal
from agent.errors import SandboxError
from agent.protocols import McpServer, Sandbox, SandboxProcess

MAX_LINE = 32 << 20  # one JSON-RPC message from a server; a longer line is a broken server
STDERR_TAIL = 2000  # characters of a server's stderr quoted in an error


class LaunchError(Exception):
    """The server cannot be reached at all (refused by the network policy); says why."""


@dataclass(frozen=True)
class Launch:
    """What starts one session's transport, and where its server's last words are."""

    streams: Callable[[], AbstractAsyncContextManager[TransportStreams]]
    stderr_tail: Callable[[], str]
    what: str  # for messages: "mcp stdio in the sandbox: python3 server.py"


def describe(server: McpServer) -> str:
    """What runs the server's tools (`--list_distributions`' backend column)."""
    if server.url is not None:
        return f"mcp http: {server.url}"
    where = "on the host" if server.host else "in the sandbox"
    return f"mcp stdio {where}: {' '.join([server.command or '', *server.args])}"


def in_sandbox(server: McpServer, sandbox: Sandbox) -> Launch:
    """The server started inside `sandbox` (its `files` written into its cwd first)."""
    started: list[SandboxProcess] = []

    @asynccontextmanager
    async def streams() -> AsyncIterator[TransportStreams]:
        cwd = server.cwd or sandbox.workdir
        for relative, data in server.files:
            await sandbox.write_file(posixpath.join(cwd, relative), data)
        argv = [server.command or "", *server.args]
        async with sandbox.spawn(argv, env=dict(server.env), cwd=server.cwd) as process:
            started[:] = [process]
            async with process_streams(process) as pair:
                yield pair

    def tail() -> str:
        return started[0].stderr_tail()[-STDERR_TAIL:] if started else ""

    return Launch(streams, tail, describe(server))


def on_host(server: McpServer) -> Launch:
    """The server started on the host by the SDK: the SDK's short list of harmless variables
    (PATH, HOME, ...) plus the entry's `env`, never the runner's own secrets."""
    tail = _HostStderr()

    @asynccontextmanager
    async def streams() -> AsyncIterator[TransportStreams]:
        env = get_default_environment() | dict(server.env)
        parameters = StdioServerParameters(  # a line not UTF-8 is read as the sandbox's are
            command=server.command or "",
            args=list(server.args),
            env=env,
            cwd=server.cwd,
            encoding_error_handler="replace",
        )
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            tail.fd = errlog.fileno()
            try:
                async with stdio_client(parameters, errlog=errlog) as pair:
                    yield pair
            finally:
                tail.last, tail.fd = tail(), None

    return Launch(streams, tail, describe(server))


class _HostStderr:
    """The tail of a host server's stderr file while it is open, what it held once closed."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.last = ""

    def __call__(self) -> str:
        if self.fd is None:
            return self.last
        size = os.fstat(self.fd).st_size
        data = os.pread(self.fd, 4 * STDERR_TAIL, max(0, size - 4 * STDERR_TAIL))
        return data.decode("utf-8", "replace")[-STDERR_TAIL:]


def over_http(server: McpServer, allow_hosts: tuple[str, ...]) -> Launch:
    """The server at `url`, its host allowed by the network policy (loopback and private
    addresses only with --allow_hosts); the SDK follows redirects only within that origin."""

    @asynccontextmanager
    async def streams() -> AsyncIterator[TransportStreams]:
        url = server.url or ""
        try:
            await NetworkPolicy.from_allow_list(allow_hosts).resolve(url)
        except PolicyRefusal as refusal:
            raise LaunchError(str(refusal)) from None
        timeout = httpx2.Timeout(server.startup_timeout, read=server.call_timeout + server.startup_timeout)
        # trust_env off: no proxy from the environment carries the request past the policy's check
        client = httpx2.AsyncClient(headers=dict(server.headers), timeout=timeout, trust_env=False)
        async with client, streamable_http_client(url, http_client=client) as pair:
            yield pair

    return Launch(streams, lambda: "", describe(server))


@asynccontextmanager
async def process_streams(process: SandboxProcess) -> AsyncIterator[TransportStreams]:
    """The SDK's stream pair over a process's stdin/stdout: one JSON-RPC message per line."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        async with read_writer:
            buffer = b""
            while chunk := await process.receive():
                *lines, buffer = (buffer + chunk).split(b"\n")
                if len(buffer) > MAX_LINE:
                    await read_writer.send(ValueError(f"a message longer than {MAX_LINE} bytes"))
                    return
                for line in lines:
                    if line.strip():
                        await read_writer.send(_parsed(line))

    async def writer() -> None:
        async with write_reader:
            try:
                async for message in write_reader:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.send(text.encode("utf-8") + b"\n")
            except SandboxError:  # it ended: the session sees its stdout close
                await read_writer.aclose()

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            group.cancel_scope.cancel()


def _parsed(line: bytes) -> SessionMessage | Exception:
    """One line as a message, or the parse error as a value the session reports. A line not
    UTF-8 is read with U+FFFD for each bad byte, as a command's output is: refused whole, the
    call it answers waited out its `call_timeout`."""
    text = line.decode("utf-8", "replace")
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError as exc:
        return exc
