"""Dispatching one tool call to its handler. Dispatch never renames a near-miss tool name: an
unknown name is an error the model sees. Argument problems and handler failures also become
tool results (`{"error": ...}`), never exceptions. Every handler runs on the event loop (a
blocking tool is wrapped in a thread where its family declares it), so there is one path."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

from agent.common.redaction import active
from agent.common.stop_signals import stop_signalled
from agent.common.unicode_text import encodable
from agent.errors import SandboxStartError
from agent.protocols import JSON, ToolConfig, ToolContext, ToolSpec
from agent.toolbox.arguments import drop_null_optionals, parse_arguments, validate_arguments

log = logging.getLogger(__name__)


def _error(message: str) -> str:
    return encodable(json.dumps({"error": message}, ensure_ascii=False))  # may quote what a tool read


def unknown_tool_result(name: str, allowed: Mapping[str, ToolSpec]) -> str:
    """The tool result for a call to a tool that is not offered (no fuzzy renaming)."""
    return _error(f"Unknown tool '{name}'. Available tools: {', '.join(sorted(allowed)) or 'none'}")


async def dispatch(
    name: str, raw_arguments: str, context: ToolContext, allowed: Mapping[str, ToolSpec]
) -> str:
    """Run one tool call on the event loop; returns the tool message content (errors as
    `{"error": ...}`). A sandbox that cannot be made raises: that fails the prompt. The content
    passes the secret redactor: the model reads what the trajectory records (an MCP server that
    echoes its `env` token does not hand it to the model's endpoint)."""
    return active().redact_text(await _run(name, raw_arguments, context, allowed))


async def _run(name: str, raw_arguments: str, context: ToolContext, allowed: Mapping[str, ToolSpec]) -> str:
    prepared = _prepare(name, raw_arguments, allowed, context.config)
    if isinstance(prepared, str):
        return prepared
    spec, args = prepared
    assert spec.handler is not None  # _prepare checked
    try:
        return _content(await spec.handler(args, context))
    except SandboxStartError:
        raise
    except asyncio.CancelledError as exc:
        if being_stopped():
            raise  # the conversation itself is being stopped
        log.debug("tool %s raised CancelledError", name, exc_info=True)  # a handler's own
        return _error(f"Tool '{name}' failed: CancelledError: {exc}")
    except BaseException as exc:  # any handler failure is a tool result the model reads:
        # sys.exit() (a script made a tool) once ended the whole worker, a KeyboardInterrupt
        # took the worker's other conversations with it, a bare BaseException hung the run.
        if isinstance(exc, KeyboardInterrupt) and stop_signalled():
            raise  # SIGTERM of the single-query command, reaching into the handler's frame
        log.debug("tool %s raised", name, exc_info=True)
        return _error(f"Tool '{name}' failed: {type(exc).__name__}: {exc}")


def being_stopped() -> bool:
    """Whether the current task was asked to stop (cancelled), as opposed to handed a
    CancelledError some code raised itself (a tool's handler): taken for a stop, that one once
    ended the conversation as stopped, to be run again, forever."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _prepare(
    name: str, raw_arguments: str, allowed: Mapping[str, ToolSpec], config: ToolConfig
) -> tuple[ToolSpec, dict[str, Any]] | str:
    """The tool and its checked arguments, or the tool result that says what is wrong."""
    spec = allowed.get(name)
    if spec is None:
        return unknown_tool_result(name, allowed)
    if spec.handler is None:
        return _error(f"Tool '{name}' is not available: {spec.available(config) or 'no handler'}")
    parsed = parse_arguments(name, raw_arguments)
    if isinstance(parsed, str):
        return _error(parsed)
    parameters: Mapping[str, Any] = spec.schema.get("parameters") or {}
    args = drop_null_optionals(parsed, parameters)
    problems = validate_arguments(args, parameters)
    if problems:
        return _error(f"Invalid arguments for '{name}': {'; '.join(problems)}")
    return spec, args


def _content(result: JSON) -> str:
    """The tool message, valid UTF-8 whatever the tool read (a diff of a Latin-1 file holds
    surrogateescape characters)."""
    return encodable(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))
