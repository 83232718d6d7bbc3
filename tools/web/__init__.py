"""The web tool family: `web_search` (a search API — Firecrawl, Tavily, Exa — or an offline
corpus indexed with SQLite FTS5) and `web_extract` (pages fetched under the network policy, or
corpus documents, as markdown). Which backend serves them: `tools.web.backends`."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from agent.protocols import JSON, ToolConfig, ToolContext, Toolset, ToolSpec
from tools.web.backends import MAX_URLS, search_unavailable

WEB_SEARCH_SCHEMA: dict[str, Any] = {
    "name": "web_search",
    "description": (
        "Search the web for information on any topic. Returns the top results, each with its "
        "title, URL and a snippet. Use web_extract on a result's URL to read the whole page."
    ),
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "The search query."}},
        "required": ["query"],
    },
}

WEB_EXTRACT_SCHEMA: dict[str, Any] = {
    "name": "web_extract",
    "description": (
        "Fetch web pages and return their main content as markdown (title, URL, text; long "
        f"pages are cut near 5,000 characters, which the result says). At most {MAX_URLS} URLs "
        "per call; a page that fails gives an error for that URL only."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "urls": {
                "type": "array",
                "items": {"type": "string"},
                "description": f"Page URLs to extract (at most {MAX_URLS}).",
                "maxItems": MAX_URLS,
            }
        },
        "required": ["urls"],
    },
}


def extract_unavailable(config: ToolConfig) -> str | None:
    """web_extract is offered with web_search only (as in the reference, where both need the
    backend): a web toolset without search would make web data without searches."""
    if importlib.util.find_spec("trafilatura") is None:
        return "trafilatura is not installed: pip install trafilatura lxml_html_clean"
    return search_unavailable(config)


# The handlers import aiohttp, lxml and trafilatura (~1.5 s): only a process that runs a web tool
# pays for them, not every process that lists the tools.
async def web_search(args: Mapping[str, Any], context: ToolContext) -> JSON:
    from tools.web.handlers import web_search as search

    return await search(args, context)


async def web_extract(args: Mapping[str, Any], context: ToolContext) -> JSON:
    from tools.web.handlers import web_extract as extract

    return await extract(args, context)


TOOLSET = Toolset(
    "web",
    "Web search and page extraction",
    (
        ToolSpec("web_search", WEB_SEARCH_SCHEMA, web_search, available=search_unavailable),
        ToolSpec("web_extract", WEB_EXTRACT_SCHEMA, web_extract, available=extract_unavailable),
    ),
)
