"""A conversation's session with one server (`context.resource(f"mcp:{server}", ...)`):
started on the first call of one of its tools, stopped with the conversation (before its
sandbox). A server that fails (will not start, dies, answers too late) is an error result the
model reads; the next call starts it again, at most `MAX_STARTS` times per conversation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from mcp.shared.exceptions import MCPError

from agent.protocols import JSON, McpServer, ToolConfig
from tools.mcp.connection import Connection, McpFailure
from tools.mcp.results import tool_message
from tools.mcp.transports import Launch

MAX_STARTS = 3  # a server that keeps failing is not started a fourth time in one conversation


class ServerSessions:
    """The current session with `server` in one conversation, (re)started on demand."""

    def __init__(self, server: McpServer, launch: Callable[[], Launch]) -> None:
        self.server, self.launch = server, launch
        self.connection: Connection | None = None
        self.starts = 0
        self._lock = asyncio.Lock()

    async def call(
        self, remote_name: str, arguments: dict[str, Any], config: ToolConfig, prompt_key: str
    ) -> JSON:
        """The tool message of one call, errors included."""
        try:
            connection = await self._connected()
            result = await connection.call(remote_name, arguments)
        except McpFailure as failure:
            return {"error": str(failure)}
        except MCPError as exc:  # the server answered with an error: the session lives on
            return {"error": f"MCP server {self.server.name}: {remote_name}: {exc}"}
        return await tool_message(result, config, prompt_key)

    async def _connected(self) -> Connection:
        async with self._lock:  # calls made at once share one start
            if self.connection is not None and self.connection.alive:
                return self.connection
            if self.connection is not None:
                await self.connection.close()
                self.connection = None
            if self.starts >= MAX_STARTS:
                raise McpFailure(
                    f"MCP server {self.server.name}: not started again: it failed {self.starts} times "
                    "in this conversation"
                )
            self.starts += 1
            server = self.server
            connection = Connection(server.name, self.launch(), server.startup_timeout, server.call_timeout)
            await connection.start()
            self.connection = connection
            return connection

    async def aclose(self) -> None:
        if self.connection is not None:
            await self.connection.close()
            self.connection = None


@asynccontextmanager
async def server_sessions(server: McpServer, launch: Callable[[], Launch]) -> AsyncIterator[ServerSessions]:
    sessions = ServerSessions(server, launch)
    try:
        yield sessions
    finally:
        await sessions.aclose()
