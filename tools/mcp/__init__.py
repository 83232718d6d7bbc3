"""MCP servers as toolsets (`--mcp_config`): one toolset per server, its tools as the server
listed them at the run's start, each call made through the official `mcp` SDK to a server
started lazily in the prompt's sandbox (or on the host, or reached over streamable HTTP)."""

from __future__ import annotations

from collections.abc import Sequence

from agent.protocols import McpServer, Toolset


def toolsets_for(servers: Sequence[McpServer]) -> tuple[Toolset, ...]:
    """One toolset per listed server (owned by the MCP work)."""
    if servers:
        raise NotImplementedError("--mcp_config")
    return ()
