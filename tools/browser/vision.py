"""`browser_vision`: a screenshot of the visible page, sent with the question to the vision
model (`--vision_model`, else the run's model) as an image content part. With `annotate`, the
interactive elements are outlined and labelled with their refs first.

The screenshot goes only to the model: the trajectory keeps the model's answer, not the image.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from agent.errors import ModelAPIError
from agent.protocols import ChatRequest, ToolContext
from tools.browser.session import BrowserSession
from tools.browser.snapshot import boxes_of_refs

MAX_ANNOTATIONS = 200
# Labels in a layer above the page that ignores the mouse; removed right after the screenshot.
_ANNOTATE_JS = """(boxes) => {
  const layer = document.createElement("div");
  layer.id = "__agent_refs";
  layer.style.cssText = "position:fixed;inset:0;pointer-events:none;z-index:2147483647";
  for (const [ref, x, y, w, h] of boxes) {
    const outline = document.createElement("div");
    outline.style.cssText = `position:absolute;left:${x}px;top:${y}px;width:${w}px;height:${h}px;` +
      "outline:2px solid #e0115f";
    const label = document.createElement("span");
    label.textContent = "@" + ref;
    label.style.cssText = "position:absolute;left:0;top:-14px;font:bold 11px sans-serif;" +
      "background:#e0115f;color:#fff;padding:0 2px";
    outline.appendChild(label);
    layer.appendChild(outline);
  }
  document.documentElement.appendChild(layer);
}"""
_REMOVE_JS = "() => document.getElementById('__agent_refs')?.remove()"


async def screenshot(session: BrowserSession, annotate: bool) -> bytes:
    """The visible page as PNG (the viewport, CSS pixels: at most 1280x800)."""
    page = session.page
    if not annotate:
        return await page.screenshot(type="png", scale="css", animations="disabled")
    raw = await page.aria_snapshot(mode="ai", boxes=True)  # also renews the refs it labels
    boxes = [[ref, *box] for ref, box in boxes_of_refs(raw)[:MAX_ANNOTATIONS]]
    await page.evaluate(_ANNOTATE_JS, boxes)
    try:
        return await page.screenshot(type="png", scale="css", animations="disabled")
    finally:
        await page.evaluate(_REMOVE_JS)


async def vision(args: Mapping[str, Any], session: BrowserSession, tools: ToolContext) -> dict[str, Any]:
    question = str(args["question"])
    annotate = bool(args.get("annotate", False))
    page = session.page
    async with session.host.busy:  # page work only: the model's answer takes no browser slot
        image = await screenshot(session, annotate)
        context_line = f"(A screenshot of {page.url}, titled {await page.title()!r}."
    if annotate:
        context_line += " Labels such as @e5 mark interactive elements with their refs."
    url = "data:image/png;base64," + base64.b64encode(image).decode("ascii")
    content = [
        {"type": "text", "text": f"{question}\n\n{context_line})"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    request = ChatRequest([{"role": "user", "content": content}], [], model=tools.config.vision_model)
    try:
        reply = await tools.model.complete(request)
    except ModelAPIError as exc:
        return {"error": f"the vision model failed: {exc}"}
    tools.add_usage(reply.usage)
    return {"answer": reply.content, "url": page.url, "screenshot_bytes": len(image)}
