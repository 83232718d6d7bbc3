"""The search APIs `web_search` speaks, each in its documented request/response shape:

- Firecrawl `POST {base}/v2/search`, `Authorization: Bearer <key>`, body `{query, limit}`;
  results in `data.web[]` (`title`, `url`, `description`); v1 servers (self-hosted) answer
  `data[]` of the same items, read too.
- Tavily `POST {base}/search`, `Authorization: Bearer <key>`, body `{query, max_results,
  search_depth: "basic"}` (1 credit); results in `results[]` (`title`, `url`, `content`).
- Exa `POST {base}/search`, `x-api-key: <key>`, body `{query, numResults, type: "auto",
  contents: {highlights: true}}`; results in `results[]` (`title`, `url`, `highlights[]`).

Every backend's answer becomes the same list of {title, url, snippet}.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

RESULTS = 5  # results per search, all backends
SNIPPET_CHARS = 400


@dataclass(frozen=True)
class SearchAPI:
    name: str
    base_url: str  # the vendor's; --web_api_url replaces it
    path: str
    auth_header: str
    auth_prefix: str
    body: Callable[[str], dict[str, Any]]
    items: Callable[[Any], list[Any]]  # the result items of a response body
    snippet: Callable[[Mapping[str, Any]], Any]

    def headers(self, key: str | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            headers[self.auth_header] = self.auth_prefix + key
        return headers

    def results(self, payload: Any) -> list[dict[str, str]]:
        """The {title, url, snippet} of a response body; ValueError when it has no results list."""
        items = self.items(payload)
        if not isinstance(items, list):
            raise ValueError("the response has no results list")
        out = []
        for item in items[:RESULTS]:
            if isinstance(item, Mapping) and isinstance(item.get("url"), str):
                snippet = self.snippet(item)
                text = " … ".join(snippet) if isinstance(snippet, list) else str(snippet or "")
                out.append(
                    {
                        "title": str(item.get("title") or item["url"]),
                        "url": item["url"],
                        "snippet": text[:SNIPPET_CHARS],
                    }
                )
        return out


def _firecrawl_items(payload: Any) -> Any:
    data = payload.get("data") if isinstance(payload, Mapping) else None
    return data.get("web") if isinstance(data, Mapping) else data  # v2: data.web, v1: data


def _results_items(payload: Any) -> Any:
    return payload.get("results") if isinstance(payload, Mapping) else None


SEARCH_APIS: dict[str, SearchAPI] = {
    "firecrawl": SearchAPI(
        "firecrawl",
        "https://api.firecrawl.dev",
        "/v2/search",
        "Authorization",
        "Bearer ",
        lambda query: {"query": query, "limit": RESULTS},
        _firecrawl_items,
        lambda item: item.get("description"),
    ),
    "tavily": SearchAPI(
        "tavily",
        "https://api.tavily.com",
        "/search",
        "Authorization",
        "Bearer ",
        lambda query: {"query": query, "max_results": RESULTS, "search_depth": "basic"},
        _results_items,
        lambda item: item.get("content"),
    ),
    "exa": SearchAPI(
        "exa",
        "https://api.exa.ai",
        "/search",
        "x-api-key",
        "",
        lambda query: {
            "query": query,
            "numResults": RESULTS,
            "type": "auto",
            "contents": {"highlights": True},
        },
        _results_items,
        lambda item: item.get("highlights") or item.get("text"),
    ),
}
