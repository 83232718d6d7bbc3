"""An aiohttp transport for the `openai` SDK's HTTP client, with the bounds of one attempt.

The SDK's default pool (httpcore) checks every idle connection's socket on each request,
which costs O(pool size) system calls per call: at hundreds of conversations in flight that
was most of the runner's CPU. aiohttp's connector hands out keep-alive connections in O(1).
The SDK still builds every request, handles errors and parses every response; only the bytes
travel through aiohttp. Errors map onto httpx2's, so the SDK's own classification holds
(timeouts → APITimeoutError, everything else → APIConnectionError).

Every attempt is bounded in time and size, whatever the endpoint does: the request's timeout
is a deadline for the whole exchange (connect, headers, the entire body), so a server that
trickles bytes or never answers cannot hold a call; a body over `max_reply_bytes`
(decompressed) is abandoned as it crosses the cap and its connection closed, never buffered
whole, raising `ReplyTooLarge`, which the SDK lets through untouched.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import aiohttp
import httpx2
import yarl

from agent.common.fetch import read_capped
from agent.config.agent_config import DEFAULT_MAX_REPLY_BYTES

# The default cap, DEFAULT_MAX_REPLY_BYTES: a chat completion holds at most ~128k output
# tokens (~0.5 MB of text); escaped as \uXXXX (×6) and repeated in `reasoning`,
# `reasoning_content` and `reasoning_details` (×3) that is ~9 MiB. 32 MiB leaves 3× headroom
# over that worst genuine reply and still bounds what one call can cost: at most the cap per
# call in flight.
LARGE_BODY = 2**20


class ReplyTooLarge(Exception):
    """The reply body crossed the cap: the same request would get the same, so not retried."""

    def __init__(self, cap: int) -> None:
        super().__init__(
            f"reply body larger than {cap} bytes: abandoned at the cap "
            f"(raise --max_reply_bytes if replies this large are genuine)"
        )
        self.cap = cap


def _deadline(extensions: dict[str, Any]) -> float | None:
    """The longest of the request's timeouts, as the deadline of the whole attempt."""
    timeout = extensions.get("timeout") or {}
    values = [v for v in timeout.values() if v is not None]
    return max(values) if values else None


async def _read_capped(response: aiohttp.ClientResponse, cap: int) -> bytes:
    """The whole body, or ReplyTooLarge as soon as it crosses `cap` (connection closed)."""
    declared = response.content_length
    if declared is not None and declared > cap and "content-encoding" not in response.headers:
        response.close()
        raise ReplyTooLarge(cap)
    body = await read_capped(response, cap)
    if len(body) > cap:
        response.close()  # the rest is never read: the connection is dropped, not reused
        raise ReplyTooLarge(cap)
    return body


def _payload(body: bytes) -> bytes | io.BytesIO | None:
    # aiohttp warns (ResourceWarning) on a bytes body over 1 MiB, which a long agent history
    # reaches; as a BytesIO it is written in chunks, yielding to the loop between them.
    return io.BytesIO(body) if len(body) > LARGE_BODY else body or None


def _headers(response: aiohttp.ClientResponse) -> list[tuple[bytes, bytes]]:
    """The reply's headers for the already-decoded body: its encoding and length dropped, or
    httpx2 would decode the body a second time (a gzip reply failed as a connection error)."""
    return [(k, v) for k, v in response.raw_headers if k.lower() not in _DECODED]


_DECODED = {b"content-encoding", b"content-length"}
NO_TIMEOUT = aiohttp.ClientTimeout(total=None)


class _Received(httpx2.Response):
    """A reply whose body the transport read whole: httpx2 would read it once more through its
    decoders (identity ones: the body is decoded already) and a chunker, ~50 µs per call."""

    def __init__(
        self, status: int, *, headers: list[tuple[bytes, bytes]], content: bytes, request: httpx2.Request
    ) -> None:
        self._content = content  # what `read` keeps: it returns it rather than reading again
        super().__init__(status, headers=headers, content=content, request=request)


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """Non-streaming HTTP/1.1 over one aiohttp session (created lazily in the running loop)."""

    def __init__(self, max_connections: int = 1000, max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES) -> None:
        if max_reply_bytes < 1:
            raise ValueError(f"max_reply_bytes must be positive, got {max_reply_bytes}")
        self.max_connections = max_connections
        self.max_reply_bytes = max_reply_bytes
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, yarl.URL] = {}  # parsed once: a chat model asks one or two URLs

    def _yarl(self, url: str) -> yarl.URL:
        found = self._urls.get(url)
        if found is None:
            if len(self._urls) >= 64:
                self._urls.clear()
            found = self._urls[url] = yarl.URL(url)
        return found

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=self.max_connections)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        try:
            async with asyncio.timeout(_deadline(request.extensions)):
                return await self._exchange(request, body)
        except TimeoutError as exc:
            raise httpx2.ReadTimeout(
                str(exc) or "no complete reply before the deadline", request=request
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx2.ConnectError(str(exc), request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.RemoteProtocolError(str(exc) or type(exc).__name__, request=request) from exc

    async def _exchange(self, request: httpx2.Request, body: bytes) -> httpx2.Response:
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "host"]
        async with self._get_session().request(
            request.method,
            self._yarl(str(request.url)),
            data=_payload(body),
            headers=headers,
            timeout=NO_TIMEOUT,  # the deadline around the whole attempt rules
            allow_redirects=False,
        ) as response:
            content = await _read_capped(response, self.max_reply_bytes)
            return _Received(response.status, headers=_headers(response), content=content, request=request)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
