"""Web tools (`web_search`, `web_extract`): declared, not implemented.

No search or extraction backend exists in this runner, so the specs carry no handler and
always report themselves unavailable; they are never offered to the model. They are declared
so that the tool map (and the tool_stats schema of every trajectory) is the same on every
machine.
"""

from __future__ import annotations

from agent.protocols import Toolset

_REASON = "no web search/extract backend is implemented in this runner"

TOOLSET = Toolset.declared_only(
    "web",
    "Web search and page extraction",
    _REASON,
    (
        {
            "name": "web_search",
            "description": "Search the web; returns titles, URLs and snippets of the top results.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "The search query."}},
                "required": ["query"],
            },
        },
        {
            "name": "web_extract",
            "description": "Fetch web pages and return their main content as markdown.",
            "parameters": {
                "type": "object",
                "properties": {
                    "urls": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Page URLs to extract (at most 5).",
                    }
                },
                "required": ["urls"],
            },
        },
    ),
)
