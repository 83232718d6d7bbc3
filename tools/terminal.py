"""The terminal tool family: `terminal` runs a shell command in the prompt's sandbox;
`process` (background process management) is declared but not offered yet.

Result of `terminal`: {"output": str, "exit_code": int, "error": str | None}. A non-zero exit
code alone is not an error (grep finding nothing exits 1); a timeout, bad arguments or a bad
workdir are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import SandboxPathError
from agent.protocols import ExecResult, Sandbox, ToolConfig, ToolHandler, Toolset, ToolSpec, on_sandbox

DEFAULT_TIMEOUT = 180  # seconds; the model may ask for another value up to MAX_TIMEOUT
MAX_TIMEOUT = 600
MAX_OUTPUT_CHARS = 50_000
HEAD_SHARE = 0.4  # of MAX_OUTPUT_CHARS kept from the start; the rest from the end

# CSI (colours, cursor moves), OSC (titles, links), charset selection (tput sgr0 emits
# ESC ( B) and the remaining 2-byte escapes.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+][0-9A-Za-z]|\x1b[@-Z\\-_]"
)

TERMINAL_SCHEMA: dict[str, Any] = {
    "name": "terminal",
    "description": (
        "Run a shell command (bash -c) in your private sandbox and return its combined "
        "stdout/stderr and exit code. Each call is a fresh shell: `cd` and variables do not "
        "persist between calls, so chain steps with && or pass `workdir`. Commands are "
        "non-interactive (stdin is empty); use flags such as -y. Background jobs (&) must "
        "redirect their output to a file. Long outputs are truncated in the middle."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command to run."},
            "timeout": {
                "type": "integer",
                "description": (
                    f"Seconds before the command is killed (default {DEFAULT_TIMEOUT}, "
                    f"at most {MAX_TIMEOUT})."
                ),
                "minimum": 1,
                "maximum": MAX_TIMEOUT,
            },
            "workdir": {
                "type": "string",
                "description": "Directory to run in (default: the sandbox's working directory).",
            },
        },
        "required": ["command"],
    },
}

PROCESS_SCHEMA: dict[str, Any] = {
    "name": "process",
    "description": "Manage background processes started with terminal: list, poll output, kill.",
    "parameters": {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["list", "poll", "log", "kill"]},
            "session_id": {"type": "string", "description": "The background process to act on."},
        },
        "required": ["action"],
    },
}


def make_terminal_handler(default_timeout: float = DEFAULT_TIMEOUT) -> ToolHandler:
    """A `terminal` handler whose default timeout is `default_timeout` (e.g. from run options)."""

    @on_sandbox
    async def run_terminal(args: Mapping[str, Any], sandbox: Sandbox) -> dict[str, Any]:
        call = _parse(args, default_timeout)
        if isinstance(call, str):
            return _failure(call)
        try:
            result = await sandbox.exec(call.command, timeout=call.timeout, cwd=call.workdir)
        except (SandboxPathError, FileNotFoundError, NotADirectoryError) as exc:
            return _failure(f"Invalid workdir {call.workdir!r}: {_reason(exc)}")
        return _answer(result, call)

    return run_terminal


@dataclass(frozen=True)
class _Call:
    command: str
    timeout: float
    workdir: str | None


def _parse(args: Mapping[str, Any], default_timeout: float) -> _Call | str:
    """The call's arguments checked, or what is wrong with them."""
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return "'command' must be a non-empty string"
    timeout = _timeout(args.get("timeout"), default_timeout)
    if isinstance(timeout, str):
        return timeout
    workdir = args.get("workdir")
    if workdir is not None and not isinstance(workdir, str):
        return "'workdir' must be a string"
    return _Call(command, timeout, workdir or None)


def _answer(result: ExecResult, call: _Call) -> dict[str, Any]:
    output = truncate_output(strip_ansi(result.output))
    if result.timed_out:
        return {"output": output, "exit_code": 124, "error": f"Command timed out after {call.timeout:g} s"}
    return {"output": output, "exit_code": result.exit_code, "error": None}


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def truncate_output(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the first 40 % and last 60 % of `limit` chars, with a marker line in between."""
    if len(text) <= limit:
        return text
    head = int(limit * HEAD_SHARE)
    tail = limit - head
    omitted = len(text) - limit
    marker = f"\n\n[OUTPUT TRUNCATED - {omitted} chars omitted out of {len(text)} total]\n\n"
    return text[:head] + marker + text[-tail:]


def _timeout(value: Any, default: float) -> float | str:
    """The timeout to use, capped at MAX_TIMEOUT, or an error message."""
    if value is None:
        return min(default, MAX_TIMEOUT)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # models sometimes quote numbers
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return f"'timeout' must be a positive number of seconds, got {value!r}"
    return min(float(value), MAX_TIMEOUT)


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _failure(message: str) -> dict[str, Any]:
    return {"output": "", "exit_code": -1, "error": message}


def _process_unavailable(config: ToolConfig) -> str:
    return "background process management is not implemented yet"


def build_toolset(default_timeout: float = DEFAULT_TIMEOUT) -> Toolset:
    """The family's tools, with `terminal` defaulting to `default_timeout` seconds."""
    terminal = ToolSpec("terminal", TERMINAL_SCHEMA, make_terminal_handler(default_timeout))
    process = ToolSpec("process", PROCESS_SCHEMA, None, available=_process_unavailable)
    return Toolset("terminal", "Shell commands and background processes", (terminal, process))


TOOLSET = build_toolset()
