"""What an endpoint knows about the requests it serves: the one a responder is answering
(`current_request`) and the running counts (`Traffic`).
"""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestContext:
    """What the server knows about the request a responder is answering, besides its body."""

    path: str
    headers: dict[str, str]  # names lower-cased: HTTP header names are case-insensitive
    received_at: float  # time.time()


_CURRENT: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "endpoint_request", default=None
)


def current_request() -> RequestContext | None:
    """The request being answered, when called from inside a responder (None elsewhere)."""
    return _CURRENT.get()


def enter_request(path: str, headers: dict[str, str]) -> None:
    """Make this request `current_request()` for the rest of its handler's task."""
    _CURRENT.set(RequestContext(path, headers, time.time()))


class Traffic:
    """Chat requests received, in flight now and at most, when the first one arrived and when
    the last one was answered.

    Only the server's event loop thread writes these; other threads read them."""

    def __init__(self) -> None:
        self.requests_total = 0
        self.inflight = 0
        self.peak_inflight = 0
        self.first_request_at: float | None = None  # time.monotonic()
        self.last_reply_at: float | None = None  # time.monotonic(): a bench's end-of-run clock starts here

    def arrived(self) -> None:
        self.requests_total += 1
        if self.first_request_at is None:
            self.first_request_at = time.monotonic()
        self.inflight += 1
        self.peak_inflight = max(self.peak_inflight, self.inflight)

    def left(self) -> None:
        self.inflight -= 1
        self.last_reply_at = time.monotonic()
