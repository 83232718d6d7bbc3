"""MCP servers as toolsets (`--mcp_config`): one toolset per server, its tools as the server
listed them at the run's start, each call made through the official `mcp` SDK to a server
started lazily in the prompt's sandbox (or on the host, or reached over streamable HTTP).

The SDK is imported only when a tool is called (`tools.mcp.sessions`): a run without MCP
servers never loads it, and it is an optional extra (`pip install -e ".[mcp]"`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent.protocols import JSON, McpServer, McpTool, ToolConfig, ToolContext, ToolHandler, Toolset, ToolSpec

if TYPE_CHECKING:
    from tools.mcp.transports import Launch

_made: dict[str, tuple[McpServer, Toolset]] = {}  # by name: the same server gives the same Toolset


def toolsets_for(servers: Sequence[McpServer]) -> tuple[Toolset, ...]:
    """One toolset per listed server; the same objects again for the same servers, so that
    registering them twice (`install_extensions`) is a no-op."""
    out = []
    for server in servers:
        made = _made.get(server.name)
        if made is None or made[0] != server:
            made = (server, _toolset(server))
            _made[server.name] = made
        out.append(made[1])
    return tuple(out)


def _toolset(server: McpServer) -> Toolset:
    specs = tuple(ToolSpec(tool.name, _schema(tool), _handler(server, tool)) for tool in server.tools)
    about = " ".join(server.description.split())
    description = about if len(about) <= 120 else about[:119] + "…"
    return Toolset(server.name, description or f"MCP server {server.name}", specs, _backend(server))


def _schema(tool: McpTool) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "parameters": tool.parameters}


def _backend(server: McpServer) -> Callable[[ToolConfig], str]:
    def backend(config: ToolConfig) -> str:
        from tools.mcp.transports import describe

        return describe(server)

    return backend


def _handler(server: McpServer, tool: McpTool) -> ToolHandler:
    async def handler(args: Mapping[str, Any], context: ToolContext) -> JSON:
        from tools.mcp.sessions import server_sessions

        launch = await _launcher(server, context)
        sessions = await context.resource(f"mcp:{server.name}", lambda: server_sessions(server, launch))
        return await sessions.call(tool.remote_name, dict(args), context.config, context.prompt_key)

    return handler


async def _launcher(server: McpServer, context: ToolContext) -> Callable[[], Launch]:
    """What starts the conversation's session with `server`: in its sandbox (opened now, before
    the session, so that the session is closed first), on the host, or over HTTP."""
    from tools.mcp.transports import in_sandbox, on_host, over_http

    if server.url is not None:
        allow = context.config.allow_hosts
        return lambda: over_http(server, allow)
    if server.host:
        return lambda: on_host(server)
    sandbox = await context.sandbox()
    return lambda: in_sandbox(server, sandbox)
