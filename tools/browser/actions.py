"""What the page-changing browser tools do: navigate, snapshot, click, type, scroll, back, press.
Each that may change the page waits for what it set off and returns the new snapshot (so refs
always belong to the page the model sees); `type` returns a short status.

`browser_tool` adapts an action to a tool handler: it opens the conversation's browser session,
turns Playwright's failures (a timeout, a ref no longer on the page) into `{"error": …}` the model
reads, and adds the requests the network policy blocked meanwhile (`blocked`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from agent.protocols import JSON, ToolContext, ToolHandler
from tools.browser.session import VIEWPORT, BrowserSession, host_of, session_of
from tools.browser.snapshot import FULL_SNAPSHOT_CHARS, SNAPSHOT_CHARS, ref_selector, render

if TYPE_CHECKING:
    from playwright.async_api import Locator

Action = Callable[[Mapping[str, Any], BrowserSession, ToolContext], Awaitable[dict[str, Any]]]
SCROLL_SHARE = 0.8  # of the viewport's height per browser_scroll
# Every action's own bound: Playwright's timeouts cover navigation and element waits, not a
# page.evaluate whose promise never settles or a page stuck in a loop.
ACTION_DEADLINE = 45.0


def browser_tool(action: Action, *, takes_turn: bool = True) -> ToolHandler:
    """`action` as a tool handler on the conversation's browser session; with `takes_turn`,
    it waits for one of the worker's browser slots (`BrowserHost.busy`) first, else it takes
    one itself for its page work only (vision: not while the model answers)."""

    async def handler(args: Mapping[str, Any], context: ToolContext) -> JSON:
        from playwright.async_api import Error as PlaywrightError

        busy = (await host_of(context)).busy if takes_turn else contextlib.nullcontext()
        async with busy:
            session = await session_of(context)
            refused_before = session.proxy.refused_total
            try:
                async with asyncio.timeout(ACTION_DEADLINE):
                    result = await action(args, session, context)
            except PlaywrightError as exc:
                result = {"error": playwright_message(exc)}
            except TimeoutError:  # a page script that never returns (a hung promise, a busy loop)
                result = {
                    "error": f"the page did not answer within {ACTION_DEADLINE:g} s (a script may be stuck)"
                }
        blocked = session.refusals_since(refused_before)
        if blocked:
            result["blocked"] = blocked
        return result

    handler.__name__ = action.__name__
    return handler


def playwright_message(exc: Exception) -> str:
    """Playwright's error without its call log, and with a hint for refs that went stale."""
    text = str(exc).split("\nCall log:", 1)[0].strip()
    text = text.split("\n", 1)[0] if len(text) > 500 else text
    if "aria-ref" in text:
        text += " (refs change with every snapshot: take a new browser_snapshot)"
    return text


async def page_snapshot(session: BrowserSession, *, full: bool = False) -> dict[str, Any]:
    """URL, title and snapshot of the current page: the visible part, or with `full` the whole."""
    page = session.page
    raw = await page.aria_snapshot(mode="ai", boxes=not full)
    viewport = None if full else (VIEWPORT["width"], VIEWPORT["height"])
    text, hidden = render(raw, viewport, FULL_SNAPSHOT_CHARS if full else SNAPSHOT_CHARS)
    result: dict[str, Any] = {"url": page.url, "title": await page.title(), "snapshot": text}
    if session.refused:
        result["error"] = "the page (or a redirect on the way to it) was blocked by the network policy"
    if hidden:
        result["outside_viewport"] = (
            f"{hidden} more elements above or below the viewport (browser_scroll, or "
            "browser_snapshot with full=true)"
        )
    return result


async def navigate(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    url = str(args["url"]).strip()
    if "://" not in url and not url.startswith(("about:", "data:", "file:", "javascript:")):
        url = "https://" + url  # "example.com": what a person typing it means
    refusal = await session.proxy.policy.check(url)
    if refusal is not None:
        return {"error": refusal}
    response = await session.page.goto(url, wait_until="domcontentloaded")
    await session.loaded()
    result = await page_snapshot(session)
    if response is not None:
        result["status"] = response.status
    return result


async def snapshot(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    return await page_snapshot(session, full=bool(args.get("full", False)))


async def element(session: BrowserSession, ref: str) -> Locator | str:
    """The element a ref names, or why there is none (without waiting for one to appear)."""
    selector = ref_selector(ref)
    if selector is None:
        return f"{ref!r} is not a ref: use one from the snapshot, such as '@e5'"
    locator = session.page.locator(selector)
    if await locator.count() == 0:
        return (
            f"no element {ref} on the page now: refs change with every snapshot, take a new browser_snapshot"
        )
    return locator


async def click(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    target = await element(session, str(args["ref"]))
    if isinstance(target, str):
        return {"error": target}
    await target.click()
    await session.settle()
    return await page_snapshot(session)


async def type_text(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    target = await element(session, str(args["ref"]))
    if isinstance(target, str):
        return {"error": target}
    await target.fill(str(args["text"]))
    return {"typed": str(args["text"]), "ref": str(args["ref"]), "url": session.page.url}


async def press(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    await session.page.keyboard.press(str(args["key"]))
    await session.settle()
    return await page_snapshot(session)


async def scroll(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    step = round(VIEWPORT["height"] * SCROLL_SHARE) * (-1 if args["direction"] == "up" else 1)
    page = session.page
    moved = await page.evaluate(
        "(dy) => { const y = window.scrollY; window.scrollBy({top: dy, behavior: 'instant'});"
        " return window.scrollY - y; }",
        step,
    )
    if not moved:  # the page scrolls an inner element, not the window: wheel over the middle
        await page.mouse.move(VIEWPORT["width"] / 2, VIEWPORT["height"] / 2)
        await page.mouse.wheel(0, step)
        await page.wait_for_timeout(200)  # wheel scrolling is asynchronous
    result = await page_snapshot(session)
    result["scrolled"] = args["direction"]
    return result


async def back(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    page = session.page
    before = page.url
    response = await page.go_back(wait_until="domcontentloaded")
    if response is None and page.url == before:
        return {"error": "there is no previous page in this tab's history"}
    await session.loaded()
    return await page_snapshot(session)
