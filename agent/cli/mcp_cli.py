"""`--mcp_config` at the CLI edge (both command lines): the file read into `McpServer`s, their
secrets added to the process's redactor at once, then every server listed, all at the same
time (a stdio server in one sandbox of the run's own backend, or on the host; an HTTP one at
its URL). A bad file, a server that will not start or list, or a tool named like another is
one line and exit 2."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

from agent.common.redaction import add
from agent.errors import AgentError, ConfigError, SandboxError
from agent.protocols import McpServer, SandboxFactory
from agent.sandboxes import SandboxOptions, resolve_backend, run_options, sandbox_factory, unavailable_reason
from tools import FAMILIES

MISSING_SDK = '--mcp_config needs the MCP SDK: pip install -e ".[mcp]"'


def mcp_servers(values: Mapping[str, Any]) -> tuple[McpServer, ...]:
    """The servers of --mcp_config, listed (none without the flag)."""
    path = values.get("mcp_config")
    if not path:
        return ()
    if importlib.util.find_spec("mcp") is None:
        raise ConfigError(MISSING_SDK)
    from tools.mcp.config import read_config

    servers = read_config(path)
    add(secret for server in servers for secret in server.secrets())  # before anything can print them
    if not servers:
        return ()
    sandboxes = _sandboxes(values) if any(s.url is None and not s.host for s in servers) else None
    listed = asyncio.run(_list_all(servers, sandboxes, tuple(values["allow_hosts"])))
    check_names(path, listed)
    return listed


def _sandboxes(values: Mapping[str, Any]) -> SandboxFactory:
    """Sandboxes of the run's own backend, for listing the servers that run in one."""
    options = SandboxOptions(
        backend=resolve_backend(values["sandbox"]),
        default_image=values.get("image") or SandboxOptions.default_image,
        network=bool(values.get("sandbox_network")),
        disk_mb=values["sandbox_disk_mb"],
        memory_mb=values["sandbox_memory_mb"],
    )
    options = run_options(options, default_image_used=True)
    reason = unavailable_reason(options)
    if reason is not None:
        raise ConfigError(
            f"--mcp_config: its servers run in sandboxes, but --sandbox={options.backend} "
            f"is unavailable here: {reason}"
        )
    return sandbox_factory(options)


async def _list_all(
    servers: Sequence[McpServer], sandboxes: SandboxFactory | None, allow_hosts: tuple[str, ...]
) -> tuple[McpServer, ...]:
    from tools.mcp.connection import McpFailure
    from tools.mcp.listing import listed

    results = await asyncio.gather(
        *(listed(server, sandboxes, allow_hosts) for server in servers), return_exceptions=True
    )
    for result in results:
        if isinstance(result, McpFailure | SandboxError | OSError):
            raise ConfigError(f"--mcp_config: {result}{_hint(result)}")
        if isinstance(result, AgentError):
            raise result
        if isinstance(result, BaseException):
            raise result
    return tuple(r for r in results if isinstance(r, McpServer))


def _hint(failure: BaseException) -> str:
    """What to try when a stdio server's program is not found where it runs (the sandbox)."""
    if "program not found" not in str(failure):
        return ""
    return (
        ' (the command runs inside the prompt\'s sandbox, on its PATH: install it there, or set "host": true)'
    )


def check_names(path: str, servers: Sequence[McpServer]) -> None:
    """No tool named like a built-in tool or another server's (unless a `tool_prefix` tells them
    apart): the model could not tell which it calls."""
    owners = {spec.name: f"the built-in toolset {f.name!r}" for f in FAMILIES for spec in f.tools}
    for server in servers:
        for tool in server.tools:
            owner = owners.get(tool.name)
            if owner is not None:
                raise ConfigError(
                    f"{path}: mcpServers.{server.name}: its tool {tool.name!r} is named like a tool of "
                    f'{owner}; set "tool_prefix" in its entry to tell them apart'
                )
            owners[tool.name] = f"the server {server.name!r}"
