"""Fetching a page the model asked for, under the network policy.

Every hop is checked: redirects are followed here (at most MAX_REDIRECTS), each target through
`NetworkPolicy.resolve`, and the connection is made by a resolver that answers only addresses
the policy allowed at that moment (`agent.common.fetch.PolicyResolver`), so a name that resolves elsewhere a
moment after the check (DNS rebinding) cannot reach a refused address. Downloads stop at
MAX_BYTES (after decompression): the rest of a larger page is not read.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp

from agent.common.fetch import PolicyResolver, read_capped
from agent.common.network_policy import NetworkPolicy, PolicyRefusal

MAX_BYTES = 2 * 1024 * 1024
MAX_REDIRECTS = 5
TIMEOUT = aiohttp.ClientTimeout(total=30, sock_connect=10)
USER_AGENT = "Mozilla/5.0 (compatible; agent-batch-runner web_extract)"
_REDIRECTS = (301, 302, 303, 307, 308)


class FetchFailed(Exception):
    """The page could not be fetched; the message is the tool result's error."""


@dataclass(frozen=True)
class Page:
    url: str  # after redirects
    content_type: str  # e.g. "text/html", lower case, no parameters
    charset: str | None
    body: bytes
    truncated: bool  # the page was larger than MAX_BYTES


@asynccontextmanager
async def fetch_session(policy: NetworkPolicy) -> AsyncIterator[aiohttp.ClientSession]:
    """The worker's session for pages: no DNS cache (each connection resolves through the
    policy), no proxies from the environment."""
    connector = aiohttp.TCPConnector(resolver=PolicyResolver(policy), use_dns_cache=False, limit_per_host=4)
    headers = {"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,text/*;q=0.9,*/*;q=0.5"}
    async with aiohttp.ClientSession(
        connector=connector, timeout=TIMEOUT, headers=headers, trust_env=False
    ) as s:
        yield s


async def fetch(session: aiohttp.ClientSession, policy: NetworkPolicy, url: str) -> Page:
    """The page at `url` after at most MAX_REDIRECTS redirects, each hop checked; raises
    FetchFailed (or PolicyRefusal) with the reason."""
    try:
        for _ in range(MAX_REDIRECTS + 1):
            await policy.resolve(url)
            async with session.get(url, allow_redirects=False) as response:
                location = response.headers.get("Location")
                if response.status in _REDIRECTS and location:
                    url = urllib.parse.urljoin(str(response.url), location)
                    continue
                if response.status >= 400:
                    raise FetchFailed(f"{url}: HTTP {response.status} {response.reason or ''}".rstrip())
                return await _read(response, url)
    except TimeoutError:
        raise FetchFailed(f"{url}: no complete answer within {TIMEOUT.total:.0f} s") from None
    except (aiohttp.InvalidURL, ValueError):
        raise FetchFailed(f"{url}: not a valid URL") from None
    except aiohttp.ClientError as exc:
        raise FetchFailed(f"{url}: cannot fetch ({type(exc).__name__}: {exc})") from None
    raise FetchFailed(f"{url}: more than {MAX_REDIRECTS} redirects")


async def _read(response: aiohttp.ClientResponse, url: str) -> Page:
    body = await read_capped(response, MAX_BYTES)
    return Page(
        url=url,
        # aiohttp reports a missing Content-Type as application/octet-stream: keep "unknown"
        content_type=response.content_type.lower() if "Content-Type" in response.headers else "",
        charset=response.charset,
        body=body[:MAX_BYTES],
        truncated=len(body) > MAX_BYTES,
    )


__all__ = ["MAX_BYTES", "FetchFailed", "Page", "PolicyRefusal", "fetch", "fetch_session", "read_capped"]
