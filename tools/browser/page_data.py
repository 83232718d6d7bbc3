"""What the browser tools read from a page without changing it: its images and its console
(messages, uncaught errors, and the value of a JavaScript expression)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent.protocols import ToolContext
from tools.browser.session import BrowserSession
from tools.browser.snapshot import cap

MAX_IMAGES = 100
MAX_URL_CHARS = 500  # a data: URL is cut: its bytes say nothing to the model
MAX_RESULT_CHARS = 8_000  # of an expression's JSON value

_IMAGES_JS = """(limit) => {
  const images = Array.from(document.images);
  return {count: images.length, images: images.slice(0, limit).map(image => ({
    src: image.currentSrc || image.src, alt: image.alt || "",
    width: image.naturalWidth, height: image.naturalHeight}))};
}"""


async def get_images(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    found = await session.page.evaluate(_IMAGES_JS, MAX_IMAGES)
    images = [
        {**image, "src": _short_url(str(image["src"]))} for image in found["images"] if image.get("src")
    ]
    result: dict[str, Any] = {"url": session.page.url, "count": found["count"], "images": images}
    if found["count"] > MAX_IMAGES:
        result["note"] = f"the first {MAX_IMAGES} of {found['count']} images"
    return result


def _short_url(url: str) -> str:
    if len(url) <= MAX_URL_CHARS:
        return url
    return f"{url[:MAX_URL_CHARS]}… ({len(url)} characters)"


async def console(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    log = session.console
    result: dict[str, Any] = {"messages": list(log.messages), "errors": list(log.errors)}
    if args.get("clear"):
        log.clear()
    expression = args.get("expression")
    if isinstance(expression, str) and expression.strip():
        result.update(await _evaluate(session, expression))
    return result


async def _evaluate(session: BrowserSession, expression: str) -> dict[str, Any]:
    from playwright.async_api import Error as PlaywrightError

    try:
        value = await session.page.evaluate(expression)
    except PlaywrightError as exc:
        return {"expression_error": str(exc).split("\nCall log:", 1)[0][:2_000]}
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > MAX_RESULT_CHARS:
        return {"result_truncated": cap(text, MAX_RESULT_CHARS)}
    return {"result": value}
