"""One bounded HTTP GET under the network policy: what the image tools fetch from a URL.

Every hop (the URL, then each redirect) is checked by `NetworkPolicy.resolve`, and the
connection is resolved through the policy too (`PolicyResolver`, also the web tools'), so a
name that resolves elsewhere a moment later cannot reach a refused address. The body is read
up to a cap and abandoned past it; the whole exchange has one deadline. Every failure is a
`FetchError` whose message is meant for the model (it becomes the tool's result).
"""

from __future__ import annotations

import asyncio
import socket
import urllib.parse
from dataclasses import dataclass

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from agent.common.network_policy import NetworkPolicy, PolicyRefusal

MAX_REDIRECTS = 5
DEFAULT_TIMEOUT = 30.0
_CHUNK = 2**16


class FetchError(Exception):
    """The URL could not be fetched; the message says why (for the model)."""


@dataclass(frozen=True)
class Fetched:
    url: str  # after redirects
    content_type: str  # the media type alone, lower-cased ("" when the server sent none)
    body: bytes


class PolicyResolver(AbstractResolver):
    """aiohttp's name resolution through the policy: only allowed addresses come back, checked
    when the connection is made (a name that resolves elsewhere after an earlier check cannot
    reach a refused address)."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        shown = f"[{host}]" if ":" in host else host
        addresses = await self._policy.resolve(f"http://{shown}:{port or 80}/")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                proto=0,
                flags=socket.AI_NUMERICHOST,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        return None


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body up to `limit` + 1 bytes (one more says it was longer); the rest is not read."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    return b"".join(chunks)[: limit + 1]


async def fetch(
    url: str, policy: NetworkPolicy, *, max_bytes: int, timeout: float = DEFAULT_TIMEOUT
) -> Fetched:
    """GET `url` (following up to MAX_REDIRECTS redirects, each one checked), at most
    `max_bytes` of body, within `timeout` seconds."""
    try:
        async with asyncio.timeout(timeout):
            for _ in range(MAX_REDIRECTS + 1):
                fetched, location = await _hop(url, policy, max_bytes)
                if fetched is not None:
                    return fetched
                url = location
    except PolicyRefusal as refusal:
        raise FetchError(str(refusal)) from None
    except TimeoutError:
        raise FetchError(f"{url}: no complete answer within {timeout:g} s") from None
    except aiohttp.ClientError as exc:
        raise FetchError(f"{url}: {type(exc).__name__}: {exc}") from None
    except ValueError as exc:  # a URL that does not parse (a bad IPv6 literal, a bad port)
        raise FetchError(f"{url}: {exc}") from None
    raise FetchError(f"{url}: more than {MAX_REDIRECTS} redirects")


async def _hop(url: str, policy: NetworkPolicy, max_bytes: int) -> tuple[Fetched | None, str]:
    """One request: (the answer, "") or (None, the redirect's absolute target)."""
    await policy.resolve(url)  # the scheme and the URL itself; the connection is checked again
    connector = aiohttp.TCPConnector(resolver=PolicyResolver(policy), use_dns_cache=False, force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector, auto_decompress=True) as session,
        session.get(url, allow_redirects=False) as response,
    ):
        if response.status in (301, 302, 303, 307, 308) and "location" in response.headers:
            return None, urllib.parse.urljoin(url, response.headers["location"])
        if response.status != 200:
            raise FetchError(f"{url}: HTTP {response.status} {response.reason or ''}".rstrip())
        declared = response.content_length
        if declared is not None and declared > max_bytes:
            raise FetchError(f"{url}: {declared} bytes, more than the {max_bytes}-byte limit")
        body = await read_capped(response, max_bytes)
        if len(body) > max_bytes:
            raise FetchError(f"{url}: more than the {max_bytes}-byte limit")
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        return Fetched(url, content_type, body), ""
