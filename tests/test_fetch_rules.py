"""The one fetch path under its two rule sets, against real servers on loopback: web_extract's
page rules and vision's image rules share the redirect loop and its checks (a redirect to an
address the policy refuses is refused on both, before any connection to it), and differ only
where the rules say (a page over the cap is cut, an image over it refused; a 2xx other than
200, or a media type other than an image, is a page but not an image). The deadline is one
for the whole exchange, every hop."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from agent.common.fetch import Fetched, FetchError, FetchRefused, FetchRules, fetch_once
from agent.common.network_policy import NetworkPolicy
from tools.vision import IMAGE_RULES, MAX_IMAGE_BYTES
from tools.web.fetch import MAX_BYTES, PAGE_RULES

pytestmark = pytest.mark.anyio
LOCAL = NetworkPolicy.from_allow_list(["127.0.0.1"])  # 127.0.0.2 is loopback too, and refused
PNG_START = b"\x89PNG\r\n\x1a\n"
OVERSIZE = MAX_IMAGE_BYTES + 2**16  # over both caps
RULES = {"page": PAGE_RULES, "image": IMAGE_RULES}


class Site:
    """An aiohttp server on one loopback address, counting the requests it gets."""

    def __init__(self, host: str) -> None:
        self.host, self.hits, self.port = host, list[str](), 0
        self.target = ""  # where /away redirects to
        app = web.Application()
        app.router.add_get("/{name}", self._answer)
        self.runner = web.AppRunner(app)

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(request.path)
        name = request.match_info["name"]
        if name == "away":
            raise web.HTTPFound(self.target)
        if name.startswith("slow"):  # a redirect chain that takes a while per hop
            await asyncio.sleep(0.4)
            raise web.HTTPFound(f"/slow{int(name[4:] or 0) + 1}")
        if name == "partial":
            return web.Response(status=203, body=PNG_START, content_type="image/png")
        if name == "image":
            return web.Response(body=PNG_START, content_type="image/png")
        if name == "page":
            return web.Response(text="<html><p>hello</p></html>", content_type="text/html")
        return await self._stream(request, name == "declared")

    async def _stream(self, request: web.Request, declared: bool) -> web.StreamResponse:
        """OVERSIZE bytes of "PNG", the length declared or not (chunked: found while reading)."""
        stream = web.StreamResponse(headers={"Content-Type": "image/png"})
        if declared:
            stream.content_length = OVERSIZE
        await stream.prepare(request)
        await stream.write(PNG_START)
        block = bytes(2**20)
        sent = len(PNG_START)
        while sent < OVERSIZE:
            chunk = block[: OVERSIZE - sent]
            await stream.write(chunk)
            sent += len(chunk)
        await stream.write_eof()
        return stream

    async def __aenter__(self) -> Site:
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


@pytest.fixture
async def sites() -> AsyncIterator[tuple[Site, Site]]:
    """An allowed site (127.0.0.1) and a refused one (127.0.0.2), both really listening."""
    async with Site("127.0.0.1") as allowed, Site("127.0.0.2") as refused:
        yield allowed, refused


async def failure(url: str, rules: FetchRules) -> FetchError:
    with pytest.raises(FetchError) as caught:
        await fetch_once(url, LOCAL, rules)
    return caught.value


@pytest.mark.parametrize("use", ["page", "image"])
async def test_a_redirect_to_a_refused_address_is_refused_before_any_connection(
    sites: tuple[Site, Site], use: str
) -> None:
    allowed, refused = sites
    for target in (refused.url("/page"), "http://10.20.30.40/admin", "http://169.254.169.254/latest/"):
        allowed.target = target
        error = await failure(allowed.url("/away"), RULES[use])
        assert isinstance(error, FetchRefused), error
        assert "refused by the network policy" in str(error) and target.split("/")[2].split(":")[0] in str(
            error
        )
    assert refused.hits == []  # reachable, and never reached
    assert isinstance(await failure(refused.url("/page"), RULES[use]), FetchRefused)
    allowed.target = allowed.url("/image")  # the same redirect within the policy is followed
    fetched = await fetch_once(allowed.url("/away"), LOCAL, RULES[use])
    assert fetched.body == PNG_START and fetched.url == allowed.url("/image")


async def test_an_oversize_image_is_refused_while_an_oversize_page_is_cut(sites: tuple[Site, Site]) -> None:
    allowed, _ = sites
    for path in ("/chunked", "/declared"):
        page = await fetch_once(allowed.url(path), LOCAL, PAGE_RULES)
        assert isinstance(page, Fetched) and page.truncated
        assert len(page.body) == MAX_BYTES and page.body.startswith(PNG_START)
        error = await failure(allowed.url(path), IMAGE_RULES)
        assert f"more than the {MAX_IMAGE_BYTES}-byte limit" in str(error)
        assert not isinstance(error, FetchRefused)
    declared = await failure(allowed.url("/declared"), IMAGE_RULES)
    assert f"{OVERSIZE} bytes, more than" in str(declared)  # refused on its header, unread


async def test_status_and_media_type_rules_differ_by_use(sites: tuple[Site, Site]) -> None:
    allowed, _ = sites
    partial = await fetch_once(allowed.url("/partial"), LOCAL, PAGE_RULES)
    assert partial.body == PNG_START and partial.content_type == "image/png" and not partial.truncated
    assert "HTTP 203" in str(await failure(allowed.url("/partial"), IMAGE_RULES))
    page = await fetch_once(allowed.url("/page"), LOCAL, PAGE_RULES)
    assert page.content_type == "text/html" and b"hello" in page.body
    refusal = str(await failure(allowed.url("/page"), IMAGE_RULES))
    assert refusal == f"{allowed.url('/page')}: not an image (Content-Type: text/html)"


async def test_one_deadline_covers_every_hop(sites: tuple[Site, Site]) -> None:
    allowed, _ = sites
    hurried = dataclasses.replace(PAGE_RULES, timeout=1.0)  # each hop 0.4 s: five of them are 2 s
    error = await failure(allowed.url("/slow0"), hurried)
    assert "no complete answer within 1 s" in str(error)
    assert len(allowed.hits) <= 4  # the deadline is the exchange's, not each hop's
