"""Replies that are no MCP message, answered at once as the error of the call they answer.

A transport hands the session a line it cannot read as an Exception, which the session skips
(a server may print junk on stdout). A reply to a call whose `result` is no object (`42`, a
list) or whose `error` is malformed is such a line too: the call then waited out its
`call_timeout` and was reported as unanswered. `checked_replies` turns each one that names its
call's id into a JSON-RPC error reply for that id, so the call fails at once saying why.

A reply naming an id no call of the session ever had was dropped by the SDK, and its call waited
out its `call_timeout` too. With one call waiting, it can only be that call's: it becomes that
call's error reply. (A second reply to an id once sent is still dropped: the call it names was
answered, or cancelled.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types
import pydantic
from mcp.client._transport import TransportStreams
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage

MAX_WHY = 300  # characters of the validation error said


@asynccontextmanager
async def checked_replies(pair: TransportStreams) -> AsyncIterator[TransportStreams]:
    """`pair` with each malformed reply to a call made that call's error reply, and a reply to
    an id never sent made the error reply of the one call waiting."""
    read, write = pair
    forward, checked = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, sending = anyio.create_memory_object_stream[SessionMessage](0)
    calls = WaitingCalls()

    async def pump_in() -> None:
        async with forward, read:
            async for item in read:
                await forward.send(calls.answered(as_error_reply(item)))

    async def pump_out() -> None:
        async with sending, write:
            async for message in sending:
                calls.note(message)
                await write.send(message)

    async with anyio.create_task_group() as group:
        group.start_soon(pump_in)
        group.start_soon(pump_out)
        try:
            yield checked, outgoing
        finally:
            group.cancel_scope.cancel()


class WaitingCalls:
    """The ids of the calls a session sent, and of those not yet answered."""

    def __init__(self) -> None:
        self.sent: set[str | int] = set()
        self.waiting: set[str | int] = set()

    def note(self, message: SessionMessage) -> None:
        if isinstance(message.message, mcp_types.JSONRPCRequest):
            request_id = coerce_request_id(message.message.id)
            self.sent.add(request_id)
            self.waiting.add(request_id)

    def answered(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        """`item`, or the one waiting call's error reply where it answers an id never sent."""
        if not isinstance(item, SessionMessage):
            return item
        reply = item.message
        if not isinstance(reply, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError) or reply.id is None:
            return item
        named = coerce_request_id(reply.id)
        self.waiting.discard(named)
        if named in self.sent or len(self.waiting) != 1:
            return item
        (request_id,) = self.waiting
        why = f"its reply names id {named!r}, which no call of this session had"
        error = mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=why[:MAX_WHY])
        return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


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
