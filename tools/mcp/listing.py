"""Listing a server's tools once, at the run's start: the server is started where its calls
will run (a stdio server in one sandbox of the run's own backend, or on the host; an HTTP one
at its URL), initialized, asked for its tools and stopped. The tools become `McpTool`s named
for the OpenAI function API (`tools.mcp.names`); the server's instructions its description."""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agent.protocols import McpServer, McpTool, Sandbox, SandboxSpec
from agent.protocols.sandbox import SandboxFactory
from tools.mcp.connection import Connection, McpFailure
from tools.mcp.names import function_names
from tools.mcp.transports import Launch, in_sandbox, on_host, over_http


async def listed(
    server: McpServer, sandboxes: SandboxFactory | None, allow_hosts: tuple[str, ...]
) -> McpServer:
    """`server` with its tools and description; McpFailure when it will not start or list."""
    if server.url is not None:
        return await _listed(server, over_http(server, allow_hosts))
    if server.host:
        return await _listed(server, on_host(server))
    if sandboxes is None:
        raise McpFailure(f"MCP server {server.name}: no sandbox backend to start it in")
    opened: AbstractAsyncContextManager[Sandbox] = sandboxes(SandboxSpec("mcp-listing", server.name))
    async with opened as sandbox:
        return await _listed(server, in_sandbox(server, sandbox))


async def _listed(server: McpServer, launch: Launch) -> McpServer:
    connection = Connection(server.name, launch, server.startup_timeout, server.call_timeout)
    await connection.start()
    try:
        tools = await connection.list_tools()
    except MCPError as exc:  # it answered with an error
        raise connection.failure(f"its tools/list answered an error: {exc}") from None
    except ValidationError as exc:  # a tool the SDK cannot read (an inputSchema not an object, ...)
        first = exc.errors()[0]  # a ValidationError holds one error at least
        where = ".".join(str(part) for part in first["loc"])
        raise connection.failure(f"its tools/list answer is malformed: {where}: {first['msg']}") from None
    finally:
        await connection.close()
    if not tools:
        raise McpFailure(f"MCP server {server.name}: it lists no tools")
    names = function_names(server.tool_prefix, [tool.name for tool in tools])
    made = tuple(_tool(name, tool) for name, tool in zip(names, tools, strict=True))
    return replace(server, tools=made, description=connection.instructions or "")


def _tool(name: str, tool: mcp_types.Tool) -> McpTool:
    schema: dict[str, Any] = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    description = tool.description or tool.title or tool.name
    return McpTool(name, tool.name, description, json.dumps(schema, sort_keys=True))
