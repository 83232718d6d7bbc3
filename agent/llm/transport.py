"""An aiohttp transport for the `openai` SDK's HTTP client.

The SDK's default pool (httpcore) checks every idle connection's socket on each request,
which costs O(pool size) system calls per call: at hundreds of conversations in flight that
was most of the runner's CPU. aiohttp's connector hands out keep-alive connections in O(1).
The SDK still builds every request, handles errors and parses every response; only the bytes
travel through aiohttp. Errors map onto httpx2's, so the SDK's own classification holds
(timeouts → APITimeoutError, everything else → APIConnectionError).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx2


def _timeout(extensions: dict[str, Any]) -> aiohttp.ClientTimeout:
    timeout = extensions.get("timeout") or {}
    return aiohttp.ClientTimeout(
        total=None,
        sock_connect=timeout.get("connect"),
        sock_read=timeout.get("read"),
    )


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """Non-streaming HTTP/1.1 over one aiohttp session (created lazily in the running loop)."""

    def __init__(self, max_connections: int = 1000) -> None:
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=self.max_connections)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "host"]
        try:
            async with self._get_session().request(
                request.method,
                str(request.url),
                data=body or None,
                headers=headers,
                timeout=_timeout(request.extensions),
                allow_redirects=False,
            ) as response:
                content = await response.read()
                return httpx2.Response(
                    response.status,
                    headers=[(k, v) for k, v in response.raw_headers],
                    content=content,
                    request=request,
                )
        except TimeoutError as exc:
            raise httpx2.ReadTimeout(str(exc) or "timed out", request=request) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx2.ConnectError(str(exc), request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.RemoteProtocolError(str(exc) or type(exc).__name__, request=request) from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
