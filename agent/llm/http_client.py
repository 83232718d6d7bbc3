"""The HTTP client the `openai` SDK sends our requests with: httpx2's, its per-request building
cut to what stays the same from call to call.

The SDK builds each request through its HTTP client's public `build_request`: httpx2's parses
the URL again (the SDK had just parsed and printed it), copies the client's headers and merges
the request's into them. For a chat model every call has the same URL and the same headers, so
each is parsed or merged once and reused (with the SDK given the whole URL, `agent.llm.client`,
it halved the CPU of building a request: 4.5 → 2.6 ms per call under cProfile). Whatever is not the
common case (a body given as data, files or JSON, query parameters, cookies, extensions, a URL
object) goes through httpx2's own `build_request`, as does every request while the client holds
cookies; the request that comes out is the same either way (`tests/test_hot_path_client.py`).
"""

from __future__ import annotations

from typing import Any

import httpx2
from httpx2._client import USE_CLIENT_DEFAULT, UseClientDefault
from httpx2._types import HeaderTypes, RequestContent, TimeoutTypes

MEMO_SIZE = 64  # distinct URLs or header sets kept: a chat model has one or two of each


class LeanAsyncClient(httpx2.AsyncClient):
    """`httpx2.AsyncClient` whose `build_request` reuses the parsed URL and the merged headers of
    earlier requests alike; its headers are its constructor's (they are
    read once per distinct request headers, not on every request)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._urls: dict[str, httpx2.URL] = {}
        self._headers_memo: dict[tuple[Any, ...], httpx2.Headers] = {}

    def build_request(
        self,
        method: str,
        url: httpx2.URL | str,
        *,
        content: RequestContent | None = None,
        headers: HeaderTypes | None = None,
        timeout: TimeoutTypes | UseClientDefault = USE_CLIENT_DEFAULT,
        **rest: Any,
    ) -> httpx2.Request:
        uncommon = any(rest.values()) or self.cookies or self.params
        if uncommon or not isinstance(url, str) or not isinstance(headers, list):
            return super().build_request(
                method, url, content=content, headers=headers, timeout=timeout, **rest
            )
        extensions = {"timeout": self._timeout_dict(timeout)}
        return httpx2.Request(
            method, self._url(url), headers=self._merged(headers), content=content, extensions=extensions
        )

    def _url(self, url: str) -> httpx2.URL:
        found = self._urls.get(url)
        if found is None:
            found = self._merge_url(url)
            _remember(self._urls, url, found)
        return found

    def _merged(self, headers: list[Any]) -> httpx2.Headers:
        key = tuple(headers)
        found = self._headers_memo.get(key)
        if found is None:
            found = httpx2.Headers(self._merge_headers(headers))
            _remember(self._headers_memo, key, found)
        return found  # the request copies it (`Headers(headers)`): this one is never changed

    def _timeout_dict(self, timeout: TimeoutTypes | UseClientDefault) -> dict[str, float | None]:
        if isinstance(timeout, UseClientDefault):
            return self.timeout.as_dict()
        return httpx2.Timeout(timeout).as_dict()


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    if len(memo) >= MEMO_SIZE:
        memo.clear()
    memo[key] = value
