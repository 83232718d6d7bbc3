"""The browser tools' schemas, parameters as the reference has them."""

from __future__ import annotations

from typing import Any

from tools.browser.snapshot import FULL_SNAPSHOT_CHARS, SNAPSHOT_CHARS


def _schema(name: str, description: str, required: tuple[str, ...] = (), **props: Any) -> dict[str, Any]:
    parameters: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        parameters["required"] = list(required)
    return {"name": name, "description": description, "parameters": parameters}


def _text(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


_REF = _text("Element reference from the latest snapshot, e.g. '@e5'.")
_SNAPSHOT_NOTE = "Returns the visible part of the new page as a snapshot with element refs (@e1, @e2, …)."

SCHEMAS: tuple[dict[str, Any], ...] = (
    _schema(
        "browser_navigate",
        f"Open a URL (http or https) in the browser. {_SNAPSHOT_NOTE}",
        ("url",),
        url=_text("URL to open."),
    ),
    _schema(
        "browser_snapshot",
        "Text snapshot of the page's accessibility tree; interactive elements carry refs such as "
        f"@e1 for browser_click and browser_type. The visible part, up to {SNAPSHOT_CHARS} "
        f"characters; full=true gives the whole page (up to {FULL_SNAPSHOT_CHARS}).",
        full={"type": "boolean", "description": "Whole page instead of the visible part.", "default": False},
    ),
    _schema("browser_click", f"Click the element with that ref. {_SNAPSHOT_NOTE}", ("ref",), ref=_REF),
    _schema(
        "browser_type",
        "Type text into the input with that ref (replacing what it holds); browser_press "
        "with 'Enter' submits.",
        ("ref", "text"),
        ref=_REF,
        text=_text("Text to type."),
    ),
    _schema(
        "browser_scroll",
        f"Scroll the page by most of a screen. {_SNAPSHOT_NOTE}",
        ("direction",),
        direction={"type": "string", "enum": ["up", "down"], "description": "Scroll direction."},
    ),
    _schema("browser_back", f"Go back to the previous page in history. {_SNAPSHOT_NOTE}"),
    _schema(
        "browser_press",
        f"Press a key on the focused element, e.g. 'Enter', 'Tab', 'Escape', 'ArrowDown'. {_SNAPSHOT_NOTE}",
        ("key",),
        key=_text("Key name, as Playwright names keys ('Enter', 'Control+A')."),
    ),
    _schema("browser_get_images", "List the images on the page with their URLs and alt text."),
    _schema(
        "browser_vision",
        "Take a screenshot of the visible page and ask the vision model a question about it.",
        ("question",),
        question=_text("What to find out from the screenshot."),
        annotate={
            "type": "boolean",
            "description": "Mark the interactive elements with their refs on the screenshot.",
            "default": False,
        },
    ),
    _schema(
        "browser_console",
        "The page's console messages and uncaught JavaScript errors; with `expression`, also "
        "evaluate JavaScript in the page and return its JSON result.",
        clear={"type": "boolean", "description": "Clear the console after reading.", "default": False},
        expression=_text("JavaScript to evaluate in the page (an expression or a function)."),
    ),
)
