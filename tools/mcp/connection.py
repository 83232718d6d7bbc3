"""One running MCP session. The SDK's transports and `ClientSession` hold anyio task groups,
which must be entered and left by one task; a conversation's resources are closed from
another (the worker's), and calls come from the handlers' tasks. So each session has an owner
task that enters everything, signals when the session is initialized, and leaves everything
when asked to stop; calls are sent from the callers' tasks over the session's streams.

Every way a server fails (will not start, dies, answers too late) is a `McpFailure` whose
message names the server, says why and quotes the tail of its stderr."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import mcp_types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from agent.sandboxes.blocking import to_the_end
from tools.mcp.replies import checked_replies
from tools.mcp.transports import Launch

# The SDK logs its transports' failures at ERROR ("Unexpected content type: text/html") beside
# the McpFailure it raises, which we say once: as the start check's one line, or as the tool
# result the model reads. Its own line would be a second copy on stderr.
logging.getLogger("mcp").setLevel(logging.CRITICAL)

STOP_GRACE = 10.0  # seconds the owner has to leave the session (the SDK's own shutdown: ~6 s at most)


class McpFailure(Exception):
    """The server failed; the message is what the model (or the operator) reads."""


class Connection:
    """A session with one server, started by `start`, ended by `close` (from any task)."""

    def __init__(self, name: str, launch: Launch, startup_timeout: float, call_timeout: float) -> None:
        self.name, self.launch = name, launch
        self.startup_timeout, self.call_timeout = startup_timeout, call_timeout
        self.session: ClientSession | None = None
        self.instructions: str | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._failure: BaseException | None = None
        self._owner: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self._owner is not None and not self._owner.done() and self.session is not None

    async def start(self) -> None:
        """Start the server and initialize the session; McpFailure when it does not."""
        self._owner = asyncio.create_task(self._own(), name=f"mcp server {self.name}")
        ready = asyncio.ensure_future(self._ready.wait())
        waited = {ready, self._owner}
        try:
            await asyncio.wait(waited, timeout=self.startup_timeout, return_when="FIRST_COMPLETED")
        except asyncio.CancelledError:  # the conversation ended meanwhile: nothing may outlive it
            ready.cancel()
            await to_the_end(asyncio.ensure_future(self.close(at_once=True)))
            raise
        if self._ready.is_set():
            return
        ready.cancel()
        why = f"did not start within {self.startup_timeout:g} s"
        if self._owner.done():
            why = f"failed to start: {self._cause()}"
        await self.close(at_once=True)  # it never read our stop: it may be stuck in its start
        raise self.failure(why)

    async def _own(self) -> None:
        try:
            async with (
                self.launch.streams() as pair,
                checked_replies(pair) as (read, write),
                ClientSession(read, write) as session,
            ):
                result = await session.initialize()
                self.instructions = result.instructions
                self.session = session
                self._ready.set()
                await self._stop.wait()
        except Exception as exc:  # noqa: BLE001 - not swallowed: start and calls report it (stderr too)
            self._failure = exc

    def _cause(self) -> str:
        failure = self._failure
        while isinstance(failure, BaseExceptionGroup) and len(failure.exceptions) == 1:
            failure = failure.exceptions[0]  # the one error inside the SDK's task groups
        if failure is None:
            return "it ended"
        text = str(failure) or type(failure).__name__
        return text if isinstance(failure, MCPError | OSError) else f"{type(failure).__name__}: {text}"

    def failure(self, why: str) -> McpFailure:
        tail = " ".join(self.launch.stderr_tail().split())
        return McpFailure(f"MCP server {self.name}: {why}" + (f" (stderr: {tail[-600:]})" if tail else ""))

    async def list_tools(self) -> list[mcp_types.Tool]:
        """Every tool the server lists (all pages)."""
        assert self.session is not None
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._bounded(self.session.list_tools(params=params), "tools/list")
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """The server's result of `name(arguments)`: McpFailure when the server died or did not
        answer within `call_timeout` (the session is then dead: drop it), MCPError when it
        answered with an error (the session lives on)."""
        assert self.session is not None
        result = await self._bounded(self.session.call_tool(name, arguments), f"the call of {name}")
        if not isinstance(result, mcp_types.CallToolResult):
            raise MCPError(-32603, f"{name} answered with a {type(result).__name__}, not a tool result")
        return result

    async def _bounded(self, request: Any, what: str) -> Any:
        """`request`'s answer, unless the server dies or takes longer than `call_timeout`."""
        assert self._owner is not None
        call, owner = asyncio.ensure_future(request), self._owner
        done, _ = await asyncio.wait({call, owner}, timeout=self.call_timeout, return_when="FIRST_COMPLETED")
        if call in done:
            try:
                return call.result()
            except MCPError as exc:
                if not _closed(exc):
                    raise
            why = f"it exited or closed its output during {what}"
        else:
            call.cancel()
            await asyncio.wait({call})
            why = f"no answer to {what} within {self.call_timeout:g} s"
        if owner.done():
            why = f"it stopped during {what}: {self._cause()}"
        await self.close()
        raise self.failure(why)

    async def close(self, *, at_once: bool = False) -> None:
        """Stop the server and leave the session (in its owner task), to the end; `at_once`:
        cancel the owner rather than ask it (the transports still stop their server then)."""
        owner, self.session = self._owner, None
        if owner is None:
            return
        self._stop.set()
        done, _ = await asyncio.wait({owner}, timeout=0 if at_once else STOP_GRACE)
        if not done:
            owner.cancel()
            with contextlib.suppress(asyncio.CancelledError):  # the cancel we just asked for
                await owner


_SDK_CLOSED = "Connection closed"  # the message of the SDK's own CONNECTION_CLOSED error


def _closed(exc: MCPError) -> bool:
    """Whether the SDK says the connection closed: its CONNECTION_CLOSED (-32000) is also
    JSON-RPC's usual code for a server's own error, which leaves the session running."""
    return exc.code == mcp_types.CONNECTION_CLOSED and exc.message == _SDK_CLOSED and exc.data is None
