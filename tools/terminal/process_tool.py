"""The `process` tool: the eight actions on a conversation's background processes.

Every result carries `error` (None on success); actions on one process also carry its
`session_id`, `status` (running, exited, killed), `exit_code` (None while it runs) and
`stdin_open`. `poll` and `wait` add `output`, what it wrote since the last poll or wait;
`wait` adds `timed_out`; `log` adds `total_lines`, `offset` and the lines as `output`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agent.protocols import ToolContext
from tools.terminal.commands import parse_timeout
from tools.terminal.processes import BackgroundProcess, ProcessError, ProcessTable, processes_of
from tools.terminal.schemas import DEFAULT_LOG_LINES, DEFAULT_WAIT, MAX_STDIN_BYTES

Result = dict[str, Any]
Action = Callable[[ProcessTable, BackgroundProcess, Mapping[str, Any]], Awaitable[Result]]


async def process_tool(args: Mapping[str, Any], context: ToolContext) -> Result:
    action = args.get("action")
    if action not in _ACTIONS and action != "list":
        return {"error": f"unknown action {action!r}; use one of list, {', '.join(_ACTIONS)}"}
    table = await processes_of(context)
    if action == "list":
        return {"processes": [p.describe() for p in table.processes()], "error": None}
    session_id = args.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        return {"error": f"'session_id' is required for action {action!r}"}
    try:
        process = table.get(session_id)
        return await _ACTIONS[action](table, process, args)
    except ProcessError as exc:
        return {"session_id": session_id, "error": str(exc)}


async def _poll(table: ProcessTable, process: BackgroundProcess, args: Mapping[str, Any]) -> Result:
    state = process.describe()  # before reading: an exit seen here means the output is complete
    return {**state, "output": await table.new_output(process)}


async def _wait(table: ProcessTable, process: BackgroundProcess, args: Mapping[str, Any]) -> Result:
    timeout = parse_timeout(args.get("timeout"), DEFAULT_WAIT)
    if isinstance(timeout, str):
        return _refused(process, timeout)
    ended = await table.wait(process, timeout)
    return {**await _poll(table, process, args), "timed_out": not ended}


async def _log(table: ProcessTable, process: BackgroundProcess, args: Mapping[str, Any]) -> Result:
    offset, limit = args.get("offset"), args.get("limit", DEFAULT_LOG_LINES)
    if offset is not None and (not isinstance(offset, int) or isinstance(offset, bool) or offset < 0):
        return _refused(process, f"'offset' must be a line number >= 0, got {offset!r}")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        return _refused(process, f"'limit' must be a positive number of lines, got {limit!r}")
    total, text = await table.log(process, offset, limit)
    start = max(0, total - limit) if offset is None else min(offset, total)
    return {**process.describe(), "total_lines": total, "offset": start, "output": text}


async def _kill(table: ProcessTable, process: BackgroundProcess, args: Mapping[str, Any]) -> Result:
    await table.kill(process)
    return process.describe()


async def _write(table: ProcessTable, process: BackgroundProcess, args: Mapping[str, Any]) -> Result:
    data = args.get("data")
    if not isinstance(data, str):
        return _refused(process, f"'data' (a string) is required for {args['action']!r}")
    raw = (data + "\n" if args["action"] == "submit" else data).encode("utf-8", errors="surrogatepass")
    if len(raw) > MAX_STDIN_BYTES:
        return _refused(process, f"'data' is over {MAX_STDIN_BYTES} bytes")
    await table.write(process, raw)
    return {**process.describe(), "bytes_written": len(raw)}


async def _close(table: ProcessTable, process: BackgroundProcess, args: Mapping[str, Any]) -> Result:
    await table.close_stdin(process)
    return process.describe()


def _refused(process: BackgroundProcess, message: str) -> Result:
    return {"session_id": process.session_id, "error": message}


_ACTIONS: dict[str, Action] = {
    "poll": _poll,
    "log": _log,
    "wait": _wait,
    "kill": _kill,
    "write": _write,
    "submit": _write,
    "close": _close,
}
