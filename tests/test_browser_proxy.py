"""The browser's policy proxy spoken to directly over TCP (no Chromium): a CONNECT tunnel (how
Chromium sends https and WebSockets) carries bytes both ways to an allowed address, a refused
CONNECT or request gets a 403 and is recorded, a proxied GET reaches the origin in origin form
and comes back with `Connection: close`, and what is not a proxy request is dropped."""

from __future__ import annotations

import asyncio

from agent.common.network_policy import NetworkPolicy
from tests.support.browser import serve_pages
from tools.browser.proxy import REFUSED_HEADER, PolicyProxy, open_proxy

LOOPBACK = NetworkPolicy.from_allow_list(["127.0.0.1"])


async def exchange(proxy: PolicyProxy, *messages: bytes) -> bytes:
    """Send `messages` to the proxy one after another, each after the previous answer began
    (a tunnel is only open once the proxy said so); everything read until the proxy closes."""
    host, port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    received = b""
    try:
        for message in messages:
            writer.write(message)
            await writer.drain()
            try:
                received += await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            except asyncio.IncompleteReadError as closed:  # the proxy closed before answering
                return received + closed.partial
        received += await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    return received


def test_a_connect_tunnel_reaches_an_allowed_address_and_carries_bytes_both_ways() -> None:
    async def scenario(base: str) -> None:
        target = base.removeprefix("http://")
        async with open_proxy(LOOPBACK) as proxy:
            answer = await exchange(
                proxy,
                f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode(),
                f"GET /next HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode(),
            )
            assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200 OK")
            assert b"The next page" in answer
            assert proxy.forwarded_total == 1 and proxy.refused_total == 0

    with serve_pages() as (base, paths):
        asyncio.run(scenario(base))
        assert paths == ["/next"]


def test_refused_connects_and_requests_get_a_403_and_are_recorded() -> None:
    async def scenario() -> None:
        async with open_proxy(NetworkPolicy()) as proxy:  # the default policy: no loopback
            tunnel = await exchange(proxy, b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n")
            request = await exchange(proxy, b"GET http://169.254.169.254/latest/ HTTP/1.1\r\n\r\n")
            for answer in (tunnel, request):
                assert answer.startswith(b"HTTP/1.1 403 Forbidden")
                assert f"{REFUSED_HEADER}: refused".encode() in answer
            assert proxy.refused_total == 2
            (tunnel_origin, tunnel_why), (request_origin, request_why) = proxy.refusals
            assert tunnel_origin == "127.0.0.1:443" and "127.0.0.1" in tunnel_why
            assert request_origin == "169.254.169.254:80" and "169.254.169.254" in request_why
            assert proxy.forwarded_total == 0

    asyncio.run(scenario())


def test_a_proxied_get_arrives_in_origin_form_and_closes() -> None:
    async def scenario(base: str) -> None:
        async with open_proxy(LOOPBACK) as proxy:
            request = f"GET {base}/search?q=a+b HTTP/1.1\r\nHost: x\r\nProxy-Connection: keep-alive\r\n\r\n"
            answer = await exchange(proxy, request.encode())
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.0 200 OK") and b"Connection: close" in head
            assert b"Results for: a b" in body
            garbage = await exchange(proxy, b"GET /not-a-proxy-request HTTP/1.1\r\n\r\n")
            assert garbage == b""  # dropped: someone spoke to the proxy as to a server

    with serve_pages() as (base, paths):
        asyncio.run(scenario(base))
        assert paths == ["/search?q=a+b"]
