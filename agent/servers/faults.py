"""How an endpoint answers when it does not answer with a completion: the OpenAI error shape,
and the deliberate misbehaviour (`EndpointFault`) that tests and benchmarks use to exercise a
client's error handling.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

FAULT_KINDS = ("http", "hang", "drop", "trickle")
TRICKLE_LENGTH = 1_000_000  # the body a trickle declares: it never gets near it
_ERROR_TYPES = {
    400: ("invalid_request_error", "bad_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("not_found_error", "not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


class EndpointFault(Exception):
    """Raised by a responder to make the server answer with an error or misbehave.

    kind "http": an error response in OpenAI's error shape with `status` and `headers`;
    "hang": never answer (the connection is held until the client gives up or the server
    stops); "drop": abort the TCP connection without any response; "trickle": a 200 and its
    headers at once, then one byte of body a second (a slow proxy, a stuck upstream) until the
    client gives up or the server stops.
    """

    def __init__(
        self,
        status: int = 500,
        message: str = "simulated server error",
        *,
        headers: dict[str, str] | None = None,
        kind: str = "http",
    ) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"EndpointFault kind must be one of {FAULT_KINDS}, not {kind!r}")
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.kind = kind


def error_body(status: int, message: str) -> dict[str, Any]:
    """An error in the shape the OpenAI API (and so its SDK) uses."""
    kind, code = _ERROR_TYPES.get(status, ("server_error" if status >= 500 else "api_error", str(status)))
    return {"error": {"message": message, "type": kind, "code": code}}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(error_body(status, message), status=status, headers=headers)


async def misbehave(
    request: web.BaseRequest, fault: EndpointFault, stopping: asyncio.Event | None
) -> web.StreamResponse:
    """Answer `request` as `fault` says; a hang lasts until `stopping` is set."""
    if fault.kind == "http":
        return error_response(fault.status, fault.message, fault.headers)
    if fault.kind == "trickle":
        return await _trickle(request, stopping)
    if fault.kind == "hang" and stopping is not None:
        await stopping.wait()
    return _abort(request)


async def _trickle(request: web.BaseRequest, stopping: asyncio.Event | None) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.content_length = TRICKLE_LENGTH
    await response.prepare(request)
    try:
        while stopping is None or not stopping.is_set():
            await response.write(b" ")
            await asyncio.sleep(1.0)
    except ConnectionError:
        pass  # the client gave up: what a trickle is for
    return _abort(request)  # never a complete body: the declared length is not reached


def _abort(request: web.BaseRequest) -> web.StreamResponse:
    """Close the TCP connection without answering; the client sees a connection error."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=500)  # never written: the transport is already gone
