"""TEST DOUBLES of the search APIs we cannot reach from tests (Firecrawl, Tavily, Exa), served on
127.0.0.1 in their documented HTTP shapes, plus the loopback server they (and the page server of
the web_extract tests) run on. This module holds no tests.

Each double records every request (method, path, headers, JSON body) and answers the vendor's
response shape; `fail_with(status, body)` makes the next answers an error, `delay` a slow answer.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class LoopbackServer:
    """An aiohttp application on 127.0.0.1 (a free port) in a background thread."""

    def __init__(self, routes: list[tuple[str, str, Handler]]) -> None:
        self.app = web.Application()
        for method, path, handler in routes:
            self.app.router.add_route(method, path, handler)
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(self.app)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


# What each vendor answers for one result, in its documented shape.
def firecrawl_answer(query: str) -> dict[str, Any]:
    items = [
        {
            "url": f"https://fc.example/{i}",
            "title": f"Firecrawl {query} {i}",
            "description": f"about {query}",
            "position": i + 1,
        }
        for i in range(7)
    ]
    return {"success": True, "data": {"web": items}}


def tavily_answer(query: str) -> dict[str, Any]:
    items = [
        {
            "title": f"Tavily {query} {i}",
            "url": f"https://tv.example/{i}",
            "content": f"chunk on {query}",
            "score": 0.9 - i / 10,
            "raw_content": None,
        }
        for i in range(3)
    ]
    return {"query": query, "answer": None, "images": [], "results": items, "response_time": 0.4}


def exa_answer(query: str) -> dict[str, Any]:
    items = [
        {
            "id": f"https://exa.example/{i}",
            "url": f"https://exa.example/{i}",
            "title": f"Exa {query} {i}",
            "publishedDate": None,
            "author": None,
            "highlights": [f"one on {query}", "two"],
            "highlightScores": [0.5, 0.4],
        }
        for i in range(2)
    ]
    return {
        "requestId": "req-1",
        "resolvedSearchType": "neural",
        "results": items,
        "costDollars": {"total": 0.007},
    }


ANSWERS: dict[str, tuple[str, Callable[[str], dict[str, Any]]]] = {
    "firecrawl": ("/v2/search", firecrawl_answer),
    "tavily": ("/search", tavily_answer),
    "exa": ("/search", exa_answer),
}


@dataclass
class SearchAPIDouble:
    """A test double of one vendor's search endpoint; use as a context manager."""

    vendor: str
    received: list[Received] = field(default_factory=list)
    status: int = 200
    error_body: Any = None
    delay: float = 0.0
    raw_answer: bytes | None = None  # answered as is instead of the vendor's shape

    def __post_init__(self) -> None:
        path, _ = ANSWERS[self.vendor]
        self.server = LoopbackServer([("POST", path, self._answer)])

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def __enter__(self) -> SearchAPIDouble:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__()

    def fail_with(self, status: int, body: Any) -> None:
        self.status, self.error_body = status, body

    async def _answer(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.received.append(Received(request.method, request.path, dict(request.headers), body))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.status != 200:
            return web.json_response(self.error_body, status=self.status)
        if self.raw_answer is not None:
            return web.Response(body=self.raw_answer, content_type="application/json")
        return web.json_response(ANSWERS[self.vendor][1](str(body.get("query"))))


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def hostile_html(kib: int = 768) -> bytes:
    """Repeated `<div><p>a b c</p></div>`: trafilatura needs ~100 s of CPU for 768 KiB of it."""
    return ("<html><body>" + "<div><p>a b c</p></div>" * (kib * 1024 // 23) + "</body></html>").encode()
