"""A run's own toolsets beside the built-in ones: the tool families of `--tools_module`
modules and one toolset per `--mcp_config` server. `install_extensions` registers them in
this process (`agent.toolbox.registry.add_toolsets`); the CLI edge calls it once the config
is built (MCP servers already listed), and every worker process before its first job, from
the same `ToolConfig`, so parent and workers share one tool map."""

from __future__ import annotations

from collections.abc import Sequence

from agent.protocols import ToolConfig, Toolset
from agent.toolbox.registry import add_toolsets
from tools.mcp import toolsets_for


def load_tool_modules(modules: Sequence[str]) -> tuple[Toolset, ...]:
    """The toolsets the `--tools_module` modules declare (owned by the tools-module work)."""
    if modules:
        raise NotImplementedError("--tools_module")
    return ()


def install_extensions(config: ToolConfig) -> None:
    """Register the run's own toolsets in this process (idempotent)."""
    add_toolsets([*load_tool_modules(config.tools_modules), *toolsets_for(config.mcp_servers)])
