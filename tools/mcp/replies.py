"""Replies that are no MCP message, answered at once as the error of the call they answer.

A transport hands the session a line it cannot read as an Exception, which the session skips
(a server may print junk on stdout). A reply to a call whose `result` is no object (`42`, a
list) or whose `error` is malformed is such a line too: the call then waited out its
`call_timeout` and was reported as unanswered. `checked_replies` turns each one that names its
call's id into a JSON-RPC error reply for that id, so the call fails at once saying why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types
import pydantic
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

MAX_WHY = 300  # characters of the validation error said


@asynccontextmanager
async def checked_replies(pair: TransportStreams) -> AsyncIterator[TransportStreams]:
    """`pair` with each malformed reply to a call made that call's error reply."""
    read, write = pair
    forward, checked = anyio.create_memory_object_stream[SessionMessage | Exception](0)

    async def pump() -> None:
        async with forward, read:
            async for item in read:
                await forward.send(as_error_reply(item))

    async with anyio.create_task_group() as group:
        group.start_soon(pump)
        try:
            yield checked, write
        finally:
            group.cancel_scope.cancel()


def as_error_reply(item: SessionMessage | Exception) -> SessionMessage | Exception:
    """`item`, or the error reply for the call a malformed reply names."""
    if not isinstance(item, pydantic.ValidationError):
        return item
    request_id = next(
        (found for e in item.errors() if (found := _reply_id(e.get("input"))) is not None), None
    )
    if request_id is None:
        return item
    why = f"its reply is not MCP: {str(item).splitlines()[0]}"[:MAX_WHY]
    error = mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=why)
    return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _reply_id(value: Any) -> str | int | None:
    """The id of a value shaped as a JSON-RPC reply (an id, and a result or an error)."""
    if not isinstance(value, dict) or not ({"result", "error"} & value.keys()):
        return None
    request_id = value.get("id")
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None
