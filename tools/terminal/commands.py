"""The `terminal` tool: a shell command in the prompt's sandbox, in the foreground (its output
and exit code) or in the background (a session id for the `process` tool).

Result of `terminal`: {"output": str, "exit_code": int, "error": str | None}. A non-zero exit
code alone is not an error (grep finding nothing exits 1); a timeout, bad arguments or a bad
workdir are. In the background: {"session_id", "status": "running", "output": "",
"exit_code": None, "error": None}.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import SandboxPathError
from agent.protocols import ExecResult, ToolContext, ToolHandler
from tools.terminal.output import shown
from tools.terminal.processes import ProcessError, processes_of
from tools.terminal.schemas import DEFAULT_TIMEOUT, MAX_TIMEOUT

_BAD_WORKDIR = (SandboxPathError, FileNotFoundError, NotADirectoryError)


def make_terminal_handler(default_timeout: float = DEFAULT_TIMEOUT) -> ToolHandler:
    """A `terminal` handler whose default timeout is `default_timeout` (e.g. from run options)."""

    async def run_terminal(args: Mapping[str, Any], context: ToolContext) -> dict[str, Any]:
        call = _parse(args, default_timeout)
        if isinstance(call, str):
            return failure(call)
        try:
            if call.background:
                return await _start(call, context)
            sandbox = await context.sandbox()
            result = await sandbox.exec(call.command, timeout=call.timeout, cwd=call.workdir)
        except _BAD_WORKDIR as exc:
            return failure(f"Invalid workdir {call.workdir!r}: {reason(exc)}")
        return _answer(result, call)

    return run_terminal


@dataclass(frozen=True)
class _Call:
    command: str
    timeout: float
    workdir: str | None
    background: bool = False


async def _start(call: _Call, context: ToolContext) -> dict[str, Any]:
    table = await processes_of(context)
    try:
        process = await table.start(call.command, call.workdir)
    except ProcessError as exc:
        return failure(str(exc))
    return {
        "session_id": process.session_id,
        "status": "running",
        "output": "",
        "exit_code": None,
        "error": None,
    }


def _parse(args: Mapping[str, Any], default_timeout: float) -> _Call | str:
    """The call's arguments checked, or what is wrong with them."""
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return "'command' must be a non-empty string"
    timeout = parse_timeout(args.get("timeout"), default_timeout)
    if isinstance(timeout, str):
        return timeout
    workdir = args.get("workdir")
    if workdir is not None and not isinstance(workdir, str):
        return "'workdir' must be a string"
    background = args.get("background", False)
    if not isinstance(background, bool):
        return "'background' must be true or false"
    return _Call(command, timeout, workdir or None, background)


def _answer(result: ExecResult, call: _Call) -> dict[str, Any]:
    output = shown(result.output)
    if result.timed_out:
        return {"output": output, "exit_code": 124, "error": f"Command timed out after {call.timeout:g} s"}
    return {"output": output, "exit_code": result.exit_code, "error": None}


def parse_timeout(value: Any, default: float) -> float | str:
    """The timeout to use, capped at MAX_TIMEOUT, or an error message."""
    if value is None:
        return min(default, MAX_TIMEOUT)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # models sometimes quote numbers
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return f"'timeout' must be a positive number of seconds, got {value!r}"
    return min(float(value), MAX_TIMEOUT)


def reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def failure(message: str) -> dict[str, Any]:
    return {"output": "", "exit_code": -1, "error": message}
