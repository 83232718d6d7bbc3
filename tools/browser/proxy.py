"""The network policy in front of a conversation's browser: a forward proxy on 127.0.0.1.

Every request of the conversation's browser context goes through its own `PolicyProxy`
(Playwright's per-context proxy; Playwright makes Chromium proxy loopback too). Each request —
every hop of a redirect chain, every subresource, worker request and WebSocket (Chromium tunnels
those with CONNECT) — is one proxy request, checked with `NetworkPolicy.resolve` and then
connected to the very addresses the check resolved, so a name that resolves differently a moment
later cannot reach a refused address. Route handlers cannot do this: Chromium follows a redirect
that a handler passed on without calling the handler again.

Plain HTTP is forwarded one request per connection (`Connection: close` both ways), which keeps
the proxy free of HTTP parsing beyond the request and status heads. A refused request gets a 403
whose body says why (Chromium shows it as the page) and is remembered in `refusals` with the
origin it aimed at, so the tool result tells the model what its page had blocked (Chromium's own
requests, such as autofill's, are refused alike but are not the page's doing).
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agent.common.network_policy import NetworkPolicy, PolicyRefusal

HEAD_LIMIT = 64 * 1024  # bytes of a request or response head
HEAD_TIMEOUT = 30.0  # seconds a client or server may take to send its head
CONNECT_TIMEOUT = 15.0  # seconds to connect to one upstream address
CHUNK = 64 * 1024
REFUSED_HEADER = "X-Network-Policy"  # on the proxy's own 403: tells a refusal from a site's 403
_HOP_HEADERS = (b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization")


class PolicyProxy:
    """One conversation's proxy: checks each request against `policy`, pins its connection."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self.policy = policy
        self.refusals: deque[tuple[str, str]] = deque(maxlen=50)  # the newest (origin, why)
        self.refused_total = 0
        self.forwarded_total = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        assert self._server is not None, "the proxy is not started"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=HEAD_LIMIT)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass  # a peer went away or stalled: this one connection ends, nothing else to tell
        except ValueError:  # a malformed request (a port out of range): refused like any other
            self.refused_total += 1
            self.refusals.append(("", "a malformed request (bad URL or port)"))
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        method, target = _request_line(head)
        url = f"https://{target}/" if method == "CONNECT" else target
        try:
            addresses = await self.policy.resolve(url)
        except PolicyRefusal as refusal:
            self.refused_total += 1
            self.refusals.append((origin_of(url), str(refusal)))
            await _answer(writer, 403, f"Blocked by the runner's network policy: {refusal}")
            return
        port = _port(url)
        try:
            upstream_reader, upstream = await _connect(addresses, port)
        except OSError as exc:
            await _answer(writer, 502, f"cannot connect to {url}: {exc.strerror or exc}")
            return
        self._writers.add(upstream)
        self.forwarded_total += 1
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await _relay(reader, writer, upstream_reader, upstream, rewrite_response=False)
            else:
                upstream.write(_origin_request(head))
                await _relay(reader, writer, upstream_reader, upstream, rewrite_response=True)
        finally:
            self._writers.discard(upstream)
            upstream.close()


@asynccontextmanager
async def open_proxy(policy: NetworkPolicy) -> AsyncIterator[PolicyProxy]:
    proxy = PolicyProxy(policy)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.aclose()


def _request_line(head: bytes) -> tuple[str, str]:
    """(method, target) of a proxy request; a malformed line raises ConnectionError (dropped)."""
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ConnectionError("malformed request line")
    method, target = parts[0], parts[1]
    if method != "CONNECT" and not target.lower().startswith(("http://", "https://")):
        raise ConnectionError("not a proxy request")  # origin-form: someone spoke to us directly
    return method, target


def origin_of(url: str) -> str:
    """`host:port` of a URL (http, https, ws, wss), the key refusals are matched to requests by."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    except ValueError:
        return ""
    return f"{(parts.hostname or '').lower()}:{port}"


def _port(url: str) -> int:
    parts = urllib.parse.urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


async def _connect(addresses: list[str], port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the first of the checked addresses that answers."""
    error: OSError = OSError("no address")
    for address in addresses:
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(address, port, limit=HEAD_LIMIT), CONNECT_TIMEOUT
            )
        except TimeoutError:
            error = OSError(f"{address}: connection timed out")
        except OSError as exc:
            error = exc
    raise error


def _origin_request(head: bytes) -> bytes:
    """The absolute-form request head as an origin server expects it, asking it to close after
    the response (one request per proxied connection)."""
    line, _, rest = head.partition(b"\r\n")
    method, target, version = line.split(b" ")
    parts = urllib.parse.urlsplit(target.decode("latin-1"))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = _without_hop_headers(rest, keep_upgrade=True)
    return b" ".join((method, path.encode("latin-1"), version)) + b"\r\n" + headers


def _without_hop_headers(block: bytes, *, keep_upgrade: bool) -> bytes:
    """Header lines (ending with the blank line) without hop-by-hop headers, plus the
    Connection header that closes (or, for an upgrade, upgrades) the connection."""
    lines = [line for line in block.split(b"\r\n") if line]
    upgrade = keep_upgrade and any(line.lower().startswith(b"upgrade:") for line in lines)
    kept = [line for line in lines if line.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS]
    kept.append(b"Connection: upgrade" if upgrade else b"Connection: close")
    return b"\r\n".join(kept) + b"\r\n\r\n"


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream: asyncio.StreamWriter,
    *,
    rewrite_response: bool,
) -> None:
    """Both directions until either side closes."""
    outbound = asyncio.ensure_future(_pipe(reader, upstream))
    inbound = asyncio.ensure_future(_response(upstream_reader, writer, rewrite_response))
    try:
        await asyncio.wait((outbound, inbound), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (outbound, inbound):
            task.cancel()
        await asyncio.gather(outbound, inbound, return_exceptions=True)


async def _response(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rewrite: bool) -> None:
    if rewrite:  # the status head gets Connection: close, so the browser never reuses us
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        line, _, rest = head.partition(b"\r\n")
        switching = line.split(b" ")[1:2] == [b"101"]
        writer.write(head if switching else line + b"\r\n" + _without_hop_headers(rest, keep_upgrade=False))
    await _pipe(reader, writer)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = text.encode("utf-8")
    reason = {403: "Forbidden", 502: "Bad Gateway"}[status]
    marker = f"{REFUSED_HEADER}: refused\r\n" if status == 403 else ""
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n{marker}"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("latin-1")
        + body
    )
    await writer.drain()
