"""Which replies `checked_replies` turns into a call's error: one to an id never sent, only
while exactly one call waits; a second reply to an id once sent goes on to the SDK (which drops
it), so a late duplicate never fails the call that waits now."""

from __future__ import annotations

from typing import Any

import mcp_types
from mcp.shared.message import SessionMessage

from tools.mcp.replies import WaitingCalls


def request(request_id: int) -> SessionMessage:
    return SessionMessage(mcp_types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="tools/call"))


def reply(request_id: Any) -> SessionMessage:
    return SessionMessage(mcp_types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={}))


def error_for(item: SessionMessage | Exception) -> Any:
    assert isinstance(item, SessionMessage)
    message = item.message
    return message.id if isinstance(message, mcp_types.JSONRPCError) else None


def test_a_reply_to_no_call_is_the_one_waiting_calls_error() -> None:
    calls = WaitingCalls()
    calls.note(request(1))
    assert error_for(calls.answered(reply(99))) == 1
    assert error_for(calls.answered(reply("1"))) is None  # "1" is 1: the SDK correlates it so too


def test_with_two_calls_waiting_or_a_known_id_the_reply_goes_on() -> None:
    calls = WaitingCalls()
    calls.note(request(1))
    calls.note(request(2))
    assert error_for(calls.answered(reply(99))) is None  # whose? either: left to call_timeout
    assert error_for(calls.answered(reply(1))) is None
    assert error_for(calls.answered(reply(1))) is None  # a duplicate, with call 2 waiting alone
    assert error_for(calls.answered(reply(2))) is None
    assert error_for(calls.answered(reply(3))) is None  # nothing waits
