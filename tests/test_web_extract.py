"""web_extract of real pages served on 127.0.0.1: main content as markdown, text as it is, the
per-page cap and the download cap, redirects followed hop by hop under the network policy
(loopback allowed only through --allow_hosts; a redirect to a refused address is refused
before any connection), and errors per URL."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agent.common.network_policy import NetworkPolicy, PolicyRefusal
from agent.common.policy_resolver import PolicyResolver
from agent.protocols import ToolConfig
from agent.toolbox.context import SandboxContext
from tests.support.batch import children_of
from tests.support.search_api_doubles import LoopbackServer, hostile_html
from tools.web import extractors
from tools.web.extract import PAGE_CHARS
from tools.web.fetch import MAX_BYTES
from tools.web.handlers import web_extract

REPO = Path(__file__).resolve().parent.parent
ARTICLE = """<!DOCTYPE html><html><head><title>Tide pools | Shore Guide</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About</a></nav>
<article><h1>Life in tide pools</h1>
<p>Tide pools form where the sea leaves water behind in rock hollows at low tide. Anemones, limpets and
small crabs live there and must survive heat, fresh rain and waves twice a day.</p>
<p>Read about <a href="/plain.txt">limpets</a> before your visit, and never lift animals off the rock.</p>
</article><footer>Shore Guide footer</footer></body></html>"""
LONG = (
    "<html><head><title>Long</title></head><body><article>"
    + "".join(f"<p>Paragraph {i}: " + "waves shape the shore slowly " * 12 + "</p>" for i in range(80))
    + "</article></body></html>"
)


def found(location: str) -> web.Response:
    return web.Response(status=302, headers={"Location": location})


class Pages:
    def __init__(self) -> None:
        self.hits: list[str] = []
        routes = [
            ("GET", path, self._page)
            for path in (
                "/article",
                "/plain.txt",
                "/long",
                "/huge",
                "/doc.pdf",
                "/data.json",
                "/untyped",
                "/missing",
                "/to-article",
                "/to-metadata",
                "/to-private",
                "/loop",
                "/chain/{n}",
                "/site/planets.html",
            )
        ]
        self.server = LoopbackServer(routes)

    def url(self, path: str) -> str:
        return f"{self.server.base_url}{path}"

    async def _page(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(request.path)
        path = request.path
        if path.startswith("/chain/"):
            n = int(request.match_info["n"])
            return found(f"/chain/{n + 1}") if n < 4 else web.Response(text="end of chain")
        redirects = {
            "/to-article": "/article",
            "/to-metadata": "http://169.254.169.254/latest/meta-data/",
            "/to-private": "http://10.20.30.40/admin",
            "/loop": "/loop",
        }
        if path in redirects:
            return found(redirects[path])
        if path == "/site/planets.html":  # the shipped corpus's page
            return web.Response(
                body=(REPO / "data/corpus/site/planets.html").read_bytes(), content_type="text/html"
            )
        if path == "/missing":
            return web.Response(status=404, text="no such page")
        if path == "/untyped":  # served as application/octet-stream: HTML is recognised by its start
            stream = web.StreamResponse()
            await stream.prepare(request)
            await stream.write(ARTICLE.encode())
            await stream.write_eof()
            return stream
        if path == "/data.json":
            return web.json_response({"tide": "low", "height_m": 0.4})
        if path == "/doc.pdf":
            return web.Response(body=b"%PDF-1.4 ...", content_type="application/pdf")
        if path == "/plain.txt":
            return web.Response(
                text="Limpets clamp to rock with a muscular foot.\n", content_type="text/plain"
            )
        if path == "/huge":
            return web.Response(
                text="<html><body><p>" + "x" * (3 * MAX_BYTES // 2) + "</p></body></html>",
                content_type="text/html",
            )
        return web.Response(text=ARTICLE if path == "/article" else LONG, content_type="text/html")


@pytest.fixture(scope="module")
def pages() -> Any:
    site = Pages()
    with site.server:
        yield site


def extract(urls: list[str], allow: tuple[str, ...] = ("127.0.0.1",)) -> list[dict[str, Any]]:
    async def call() -> dict[str, Any]:
        context = SandboxContext(None, ToolConfig(allow_hosts=allow))  # type: ignore[arg-type]
        try:
            return await web_extract({"urls": urls}, context)
        finally:
            await context.aclose()

    result = asyncio.run(call())
    assert "results" in result, result
    return list(result["results"])


def test_an_html_page_becomes_its_main_content_as_markdown_with_title_and_absolute_links(
    pages: Pages,
) -> None:
    [page] = extract([pages.url("/article")])
    assert page["url"] == pages.url("/article")
    assert page["title"] == "Life in tide pools"
    content = page["content"]
    assert content.startswith("# Life in tide pools") and "Anemones, limpets" in content
    assert f"[limpets]({pages.url('/plain.txt')})" in content  # relative links made absolute
    assert "Shore Guide footer" not in content and "About" not in content  # boilerplate dropped
    assert "note" not in page


def test_a_list_of_links_is_kept_with_absolute_urls(pages: Pages) -> None:
    [page] = extract([pages.url("/site/planets.html")])
    for planet in ("Mercury", "Venus", "Mars", "Jupiter", "Saturn"):
        assert f"[{planet}]({pages.url('/site/planets/' + planet.lower() + '.html')})" in page["content"]
    assert pages.url("/site/visit.html") not in page["content"]  # navigation is not content


def test_text_is_served_as_it_is_and_errors_come_per_url(pages: Pages) -> None:
    text, data, missing, pdf = extract(
        [pages.url("/plain.txt"), pages.url("/data.json"), pages.url("/missing"), pages.url("/doc.pdf")]
    )
    assert text["content"] == "Limpets clamp to rock with a muscular foot."
    assert data["content"] == '{"tide": "low", "height_m": 0.4}'  # JSON as it is
    assert "HTTP 404" in missing["error"] and "browser tool" in missing["error"]
    assert "PDF" in pdf["error"]


def test_a_malformed_url_fails_only_its_own_entry(pages: Pages) -> None:
    bad, article, bad_hop = extract(
        ["http://host:notaport/", pages.url("/article"), "http://127.0.0.1:99999/"]
    )
    assert "not a valid URL" in bad["error"] and "not a valid URL" in bad_hop["error"]
    assert article["title"] == "Life in tide pools"


def test_a_long_page_is_cut_near_the_cap_and_says_so(pages: Pages) -> None:
    [page] = extract([pages.url("/long")])
    assert PAGE_CHARS * 0.8 <= len(page["content"]) <= PAGE_CHARS
    assert page["chars"] > 20_000
    assert f"cut to the first {len(page['content']):,} of {page['chars']:,} characters" in page["note"]


def test_a_page_over_the_download_cap_is_read_only_up_to_it(pages: Pages) -> None:
    [page] = extract([pages.url("/huge")])
    assert "larger than 2 MiB" in page["note"]
    assert page["chars"] <= MAX_BYTES


def test_an_untyped_page_is_recognised_as_html(pages: Pages) -> None:
    [page] = extract([pages.url("/untyped")])
    assert page["title"] == "Life in tide pools" and page["content"].startswith("# Life in tide pools")


def test_redirects_are_followed_to_the_final_page(pages: Pages) -> None:
    article, chain = extract([pages.url("/to-article"), pages.url("/chain/0")])
    assert article["url"] == pages.url("/article") and "Anemones" in article["content"]
    assert chain["content"] == "end of chain" and chain["url"] == pages.url("/chain/4")


def test_loopback_is_refused_without_allow_hosts_and_nothing_is_requested(pages: Pages) -> None:
    before = len(pages.hits)
    [page] = extract([pages.url("/article")], allow=())
    assert "refused by the network policy" in page["error"] and "--allow_hosts" in page["error"]
    assert len(pages.hits) == before


@pytest.mark.parametrize("path", ["/to-metadata", "/to-private"])
def test_a_redirect_from_an_allowed_host_to_a_refused_address_is_refused(pages: Pages, path: str) -> None:
    [page] = extract([pages.url(path)])
    assert "refused by the network policy" in page["error"]
    assert "169.254.169.254" in page["error"] or "10.20.30.40" in page["error"]


def test_a_redirect_loop_stops_after_five_hops(pages: Pages) -> None:
    [page] = extract([pages.url("/loop")])
    assert "more than 5 redirects" in page["error"]


def test_more_than_five_urls_is_an_error_and_other_schemes_are_refused(pages: Pages) -> None:
    async def call(urls: list[str]) -> dict[str, Any]:
        context = SandboxContext(None, ToolConfig())  # type: ignore[arg-type]
        try:
            return await web_extract({"urls": urls}, context)
        finally:
            await context.aclose()

    assert "at most 5 URLs" in asyncio.run(call([pages.url("/article")] * 6))["error"]
    [page] = asyncio.run(call(["file:///etc/passwd"]))["results"]
    assert "only http and https" in page["error"]


def test_the_connection_resolver_answers_only_addresses_the_policy_allows() -> None:
    async def resolve(policy: NetworkPolicy) -> list[str]:
        return [entry["host"] for entry in await PolicyResolver(policy).resolve("localhost", 80)]

    with pytest.raises(PolicyRefusal, match="localhost resolves to"):
        asyncio.run(resolve(NetworkPolicy.from_allow_list([])))
    allowed = asyncio.run(resolve(NetworkPolicy.from_allow_list(["127.0.0.0/8", "::1"])))
    assert allowed and set(allowed) <= {"127.0.0.1", "::1"}


def extract_children() -> list[int]:
    """This process's page converters that are still alive."""
    return [
        pid
        for pid in children_of(os.getpid())
        if b"tools.web.extract_child" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]


@pytest.fixture(scope="module")
def hostile() -> Any:
    hits: list[str] = []

    async def page(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=hostile_html(), content_type="text/html")

    with LoopbackServer([("GET", "/hostile", page)]) as server:
        yield server, hits


def test_a_page_too_slow_to_convert_is_an_error_within_the_bound_and_its_process_is_gone(
    pages: Pages, hostile: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(extractors, "EXTRACT_SECONDS", 3.0)
    server, _ = hostile
    started = time.monotonic()
    slow, article = extract([f"{server.base_url}/hostile", pages.url("/article")])
    elapsed = time.monotonic() - started
    assert "longer than its 3 s limit" in slow["error"] and "browser tool" in slow["error"]
    assert article["title"] == "Life in tide pools"  # the other page of the call is converted
    assert elapsed < 30, elapsed  # 3 s + starting the converters; unbounded it takes ~100 s
    assert extract_children() == []


def test_cancelling_a_conversion_returns_at_once_and_leaves_no_process(hostile: Any) -> None:
    server, hits = hostile

    async def cancel_midway() -> float:
        context = SandboxContext(None, ToolConfig(allow_hosts=("127.0.0.1",)))  # type: ignore[arg-type]
        served = len(hits)
        call = asyncio.ensure_future(web_extract({"urls": [f"{server.base_url}/hostile"]}, context))
        while len(hits) == served or not extract_children():
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # well into the conversion
        started = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        took = time.monotonic() - started
        await context.aclose()
        return took

    took = asyncio.run(cancel_midway())
    assert took < 2.0, took  # unbounded: until the conversion ends, ~100 s
    assert extract_children() == []
