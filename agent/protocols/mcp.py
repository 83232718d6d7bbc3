"""What a run knows of its MCP servers (`--mcp_config`): each server as its entry declares it,
and, once listed at the run's start, its tools. Both are plain frozen values: they travel to
the workers inside the run's `ToolConfig` (pickled), where `tools.mcp` turns each server into
a toolset. Secrets (`env` values, `headers` values) are kept out of `repr` and `public()`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TRANSPORTS = ("stdio", "http")


@dataclass(frozen=True)
class McpTool:
    """One tool a server listed: `name` is what the model calls (the server's own name unless
    it had to be made a valid, unique function name), `remote_name` what the server is called with."""

    name: str
    remote_name: str
    description: str
    parameters_json: str  # the tool's input JSON schema, as JSON text (a frozen value)

    @property
    def parameters(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.parameters_json)
        return value


@dataclass(frozen=True)
class McpServer:
    """One `mcpServers` entry: a stdio server (`command`, `args`, `env`), run inside the
    prompt's sandbox unless `host`, or a streamable-HTTP server (`url`, `headers`)."""

    name: str  # the toolset's name
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets: values never shown
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets: values never shown
    host: bool = False  # stdio: run on the runner's host instead of in the prompt's sandbox
    cwd: str | None = None  # stdio: working directory (in the sandbox unless `host`)
    # stdio in a sandbox: (path relative to the server's cwd, contents) written before each start,
    # read at the CLI edge from the entry's "files" ({"server.py": "host/path/server.py"})
    files: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    startup_timeout: float = 30.0  # seconds to start and initialize a session
    call_timeout: float = 60.0  # seconds per tool call
    tool_prefix: str = ""  # put before each tool's name (to tell apart servers that share names)
    description: str = ""  # the server's instructions (else its name), read when it is listed
    tools: tuple[McpTool, ...] = ()  # filled when the run lists the server at its start

    @property
    def transport(self) -> str:
        return "http" if self.url is not None else "stdio"

    def secrets(self) -> tuple[str, ...]:
        """The values the redactor must hide (every `env` and `headers` value)."""
        return tuple(v for v in (*self.env.values(), *self.headers.values()) if v)

    def public(self) -> dict[str, Any]:
        """JSON-able, without secrets: what `run_config.json` records of the server."""
        return {
            "name": self.name,
            "transport": self.transport,
            "command": self.command,
            "args": list(self.args),
            "env": sorted(self.env),  # which variables are set, never their values
            "url": self.url,
            "headers": sorted(self.headers),
            "host": self.host,
            "cwd": self.cwd,
            "files": [name for name, _data in self.files],
            "startup_timeout": self.startup_timeout,
            "call_timeout": self.call_timeout,
            "tool_prefix": self.tool_prefix,
            "tools": [tool.name for tool in self.tools],
        }
