"""The reference's tool API for scripts: the registry and dispatch, re-exported from
`agent.toolbox` (where they live, below the loop, so `agent/` never imports this file)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from agent.protocols import Sandbox, ToolSpec
from agent.toolbox.arguments import validate_arguments
from agent.toolbox.context import SandboxContext
from agent.toolbox.dispatch import dispatch, unknown_tool_result
from agent.toolbox.registry import (
    ALL_TOOLS,
    TOOL_TO_TOOLSET_MAP,
    ResolvedTools,
    resolve_tools,
    toolset_availability,
    unavailable_reason,
)

__all__ = [
    "ALL_TOOLS",
    "TOOL_TO_TOOLSET_MAP",
    "ResolvedTools",
    "dispatch",
    "get_tool_definitions",
    "handle_function_call",
    "resolve_tools",
    "toolset_availability",
    "unavailable_reason",
    "unknown_tool_result",
    "validate_arguments",
]


def get_tool_definitions(
    enabled_toolsets: Iterable[str] | None, disabled_toolsets: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """The API tool definitions offered for these toolsets (None: all), as the reference's."""
    return resolve_tools(enabled_toolsets, disabled_toolsets).definitions


def handle_function_call(
    name: str, raw_arguments: str, sandbox: Sandbox, allowed: Mapping[str, ToolSpec]
) -> str:
    """`dispatch` for synchronous scripts: the call runs on an event loop of its own (so not
    from inside a running loop: there, await `dispatch`)."""
    return asyncio.run(_dispatch_on(sandbox, name, raw_arguments, allowed))


async def _dispatch_on(
    sandbox: Sandbox, name: str, raw_arguments: str, allowed: Mapping[str, ToolSpec]
) -> str:
    context = SandboxContext(sandbox)
    try:
        return await dispatch(name, raw_arguments, context, allowed)
    finally:
        await context.aclose()
