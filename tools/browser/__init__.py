"""The browser tool family (`browser_*`): Playwright driving the system's headless Chromium.

One Chromium per worker process, one browser context per conversation (closed with it), every
request through the network policy (`proxy`), accessibility-tree snapshots whose refs
`browser_click`/`browser_type` take (`snapshot`), screenshots for the vision model (`vision`).
Not offered when Playwright or Chromium is missing (`host.unavailable` says how to get them).
"""

from __future__ import annotations

from agent.protocols import Toolset, ToolSpec
from tools.browser import actions, page_data, vision
from tools.browser.host import unavailable
from tools.browser.schemas import SCHEMAS

_ACTIONS: dict[str, actions.Action] = {
    "browser_navigate": actions.navigate,
    "browser_snapshot": actions.snapshot,
    "browser_click": actions.click,
    "browser_type": actions.type_text,
    "browser_scroll": actions.scroll,
    "browser_back": actions.back,
    "browser_press": actions.press,
    "browser_get_images": page_data.get_images,
    "browser_vision": vision.vision,
    "browser_console": page_data.console,
}

TOOLSET = Toolset(
    "browser",
    "Browser automation",
    tuple(
        ToolSpec(
            schema["name"], schema, actions.browser_tool(_ACTIONS[schema["name"]]), available=unavailable
        )
        for schema in SCHEMAS
    ),
)
