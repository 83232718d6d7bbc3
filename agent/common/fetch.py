"""The one bounded HTTP GET under the network policy: pages for `web_extract`, images for the
image tools.

Every hop (the URL, then each redirect, at most MAX_REDIRECTS) is checked by
`NetworkPolicy.resolve`, and each connection is resolved through the policy too
(`PolicyResolver`), so a name that resolves elsewhere a moment after the check (DNS rebinding)
cannot reach a refused address. The body is read up to a cap and abandoned past it; the whole
exchange, every hop, has one deadline. What differs between uses (which statuses are an answer,
which media types, the size limit and whether a larger body is cut or refused, the deadline)
is a `FetchRules`. Every failure is a `FetchError` whose message is meant for the model (it
becomes the tool's result); a `FetchRefused` when the network policy refused a hop.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agent.common.network_policy import NetworkPolicy, PolicyRefusal

if TYPE_CHECKING:
    import aiohttp

MAX_REDIRECTS = 5
DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0  # of the exchange's deadline, at most this long to connect
_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 2**16


class FetchError(Exception):
    """The URL could not be fetched; the message says why (for the model)."""


class FetchRefused(FetchError):
    """The network policy refused the URL or a redirect's target (no connection was made to it)."""


@dataclass(frozen=True)
class FetchRules:
    """What one use of `fetch` accepts."""

    max_bytes: int  # of body, after decompression
    oversize: Literal["refuse", "truncate"] = "refuse"  # a larger body fails, or its start is kept
    statuses: range = range(200, 201)  # the final answer's status codes read (others fail)
    content_types: tuple[str, ...] = ()  # media-type prefixes read (none sent passes); () any
    wanted: str = ""  # what `content_types` describe, for the refusal ("an image")
    timeout: float = DEFAULT_TIMEOUT  # seconds for the whole exchange, every hop


@dataclass(frozen=True)
class Fetched:
    url: str  # after redirects
    content_type: str  # the media type alone, lower-cased ("" when the server sent none)
    charset: str | None
    body: bytes  # at most the rules' max_bytes
    truncated: bool  # the body was longer than max_bytes (only when the rules truncate)


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


@asynccontextmanager
async def policy_session(
    policy: NetworkPolicy, headers: Mapping[str, str] | None = None
) -> AsyncIterator[aiohttp.ClientSession]:
    """A session for `fetch`: every connection resolved through the policy (no DNS cache), no
    proxies from the environment; the deadline is each fetch's (its rules')."""
    # aiohttp (~0.2 s) is imported by the first fetch, not by every process that imports the
    # tools (the runner's parent, run_agent.py --help)
    import aiohttp

    from agent.common.policy_resolver import PolicyResolver

    connector = aiohttp.TCPConnector(resolver=PolicyResolver(policy), use_dns_cache=False, limit_per_host=4)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=headers, trust_env=False
    ) as session:
        yield session


async def fetch_once(url: str, policy: NetworkPolicy, rules: FetchRules) -> Fetched:
    """`fetch` in a session of its own (a tool that fetches now and then)."""
    async with policy_session(policy) as session:
        return await fetch(session, policy, url, rules)


async def fetch(
    session: aiohttp.ClientSession, policy: NetworkPolicy, url: str, rules: FetchRules
) -> Fetched:
    """GET `url` through `session` (one from `policy_session(policy)`), following up to
    MAX_REDIRECTS redirects, each hop checked, as `rules` say; raises FetchError."""
    import aiohttp  # loaded already: `session` is one

    try:
        async with asyncio.timeout(rules.timeout):
            for _ in range(MAX_REDIRECTS + 1):
                await policy.resolve(url)  # the scheme, the URL itself; its connection again
                async with session.get(url, allow_redirects=False) as response:
                    location = response.headers.get("Location")
                    if response.status in _REDIRECTS and location:
                        url = urllib.parse.urljoin(str(response.url), location)
                        continue
                    return await _answer(response, url, rules)
    except PolicyRefusal as refusal:
        raise FetchRefused(str(refusal)) from None
    except TimeoutError:
        raise FetchError(f"{url}: no complete answer within {rules.timeout:g} s") from None
    except ValueError as exc:  # aiohttp.InvalidURL too: a URL the policy parsed but aiohttp not
        raise FetchError(f"{url}: not a valid URL ({exc})") from None
    except aiohttp.ClientError as exc:
        raise FetchError(f"{url}: cannot fetch ({type(exc).__name__}: {exc})") from None
    raise FetchError(f"{url}: more than {MAX_REDIRECTS} redirects")


async def _answer(response: aiohttp.ClientResponse, url: str, rules: FetchRules) -> Fetched:
    """The final answer read as `rules` say: its status, media type and size checked first."""
    if response.status not in rules.statuses:
        raise FetchError(f"{url}: HTTP {response.status} {response.reason or ''}".rstrip())
    # aiohttp reports a missing Content-Type as application/octet-stream: keep "none sent"
    content_type = response.content_type.lower() if "Content-Type" in response.headers else ""
    if rules.content_types and content_type and not content_type.startswith(rules.content_types):
        raise FetchError(f"{url}: not {rules.wanted} (Content-Type: {content_type})")
    limit, refuse = rules.max_bytes, rules.oversize == "refuse"
    declared = response.content_length
    if refuse and declared is not None and declared > limit:
        raise FetchError(f"{url}: {declared} bytes, more than the {limit}-byte limit")
    body = await read_capped(response, limit)
    if refuse and len(body) > limit:
        raise FetchError(f"{url}: more than the {limit}-byte limit")
    return Fetched(url, content_type, response.charset, body[:limit], len(body) > limit)
