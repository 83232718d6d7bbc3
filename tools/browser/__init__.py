"""The browser tool family (`browser_*`): Playwright driving the system's headless Chromium.

One Chromium per worker process, one browser context per conversation (closed with it), every
request through the network policy (`proxy`), accessibility-tree snapshots whose refs
`browser_click`/`browser_type` take (`snapshot`), screenshots for the vision model (`vision`).
Not offered when Playwright or Chromium is missing (`host.unavailable` says how to get them).
"""

from __future__ import annotations

from typing import Any

from agent.protocols import ToolConfig, Toolset, ToolSpec, sees_images
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

_OWN_TURNS = {"browser_vision"}  # take a browser slot for their page work only


def _spec(schema: dict[str, Any]) -> ToolSpec:
    name = schema["name"]
    handler = actions.browser_tool(_ACTIONS[name], takes_turn=name not in _OWN_TURNS)
    return ToolSpec(
        name, schema, handler, available=_with_images if name == "browser_vision" else unavailable
    )


def _with_images(config: ToolConfig) -> str | None:
    return unavailable(config) or sees_images(config)


TOOLSET = Toolset("browser", "Browser automation", tuple(_spec(schema) for schema in SCHEMAS))
