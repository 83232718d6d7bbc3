"""Browser tools (`browser_*`): declared, not implemented.

No browser automation backend exists in this runner; the specs have no handler, always
report themselves unavailable and are never offered to the model. They are declared so that
the tool map (and the tool_stats schema of every trajectory) is the same on every machine.
"""

from __future__ import annotations

from typing import Any

from agent.protocols import Toolset


def _browser_tool(
    name: str, description: str, required: tuple[str, ...] = (), **props: Any
) -> dict[str, Any]:
    parameters: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        parameters["required"] = list(required)
    return {"name": name, "description": description, "parameters": parameters}


def _text(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


_REF = _text("Element reference from the latest snapshot, e.g. '@e5'.")

TOOLSET = Toolset.declared_only(
    "browser",
    "Browser automation",
    "no browser automation backend is implemented in this runner",
    (
        _browser_tool("browser_navigate", "Open a URL in the browser.", ("url",), url=_text("URL to open.")),
        _browser_tool(
            "browser_snapshot",
            "Return the page's accessibility tree with element references.",
            full={"type": "boolean", "description": "Whole page instead of the visible part."},
        ),
        _browser_tool("browser_click", "Click an element.", ("ref",), ref=_REF),
        _browser_tool(
            "browser_type", "Type text into an input.", ("ref", "text"), ref=_REF, text=_text("Text.")
        ),
        _browser_tool(
            "browser_scroll",
            "Scroll the page.",
            ("direction",),
            direction={"type": "string", "enum": ["up", "down"], "description": "Scroll direction."},
        ),
        _browser_tool("browser_back", "Go back to the previous page."),
        _browser_tool("browser_press", "Press a key, e.g. 'Enter'.", ("key",), key=_text("Key name.")),
        _browser_tool("browser_get_images", "List the images on the page with their URLs and alt text."),
        _browser_tool(
            "browser_vision",
            "Answer a question about a screenshot of the page.",
            ("question",),
            question=_text("What to find out from the screenshot."),
        ),
        _browser_tool(
            "browser_console",
            "Return the page's console messages and errors.",
            clear={"type": "boolean", "description": "Clear the console after reading."},
        ),
    ),
)
