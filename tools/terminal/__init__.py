"""The terminal tool family: `terminal` runs a shell command in the prompt's sandbox, in the
foreground or the background; `process` manages the background ones (list, poll, log, wait,
kill, write, submit, close). Both work alike on every sandbox backend: background processes
are built on `Sandbox.exec` only (see `processes`)."""

from __future__ import annotations

from agent.protocols import ToolConfig, Toolset, ToolSpec
from tools.terminal.commands import make_terminal_handler
from tools.terminal.output import MAX_OUTPUT_CHARS, strip_ansi, truncate_output
from tools.terminal.process_tool import process_tool
from tools.terminal.schemas import DEFAULT_TIMEOUT, MAX_TIMEOUT, PROCESS_SCHEMA, TERMINAL_SCHEMA

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_OUTPUT_CHARS",
    "MAX_TIMEOUT",
    "TOOLSET",
    "build_toolset",
    "make_terminal_handler",
    "strip_ansi",
    "truncate_output",
]


def build_toolset(default_timeout: float = DEFAULT_TIMEOUT) -> Toolset:
    """The family's tools, with `terminal` defaulting to `default_timeout` seconds."""
    terminal = ToolSpec("terminal", TERMINAL_SCHEMA, make_terminal_handler(default_timeout))
    process = ToolSpec("process", PROCESS_SCHEMA, process_tool)
    tools = (terminal, process)
    return Toolset("terminal", "Shell commands and background processes", tools, backend=_backend)


def _backend(config: ToolConfig) -> str:
    return "the prompt's sandbox (--sandbox)"


TOOLSET = build_toolset()
