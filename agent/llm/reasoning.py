"""Reasoning capture: one place that separates a model's reasoning from its answer.

Providers return reasoning in fields (`reasoning`, `reasoning_content`, `reasoning_details`)
or inline (`<think>`, `<thinking>`, `<REASONING_SCRATCHPAD>` blocks in the content). We keep
it once, in `reasoning`, and remove inline blocks from the content, so the trajectory never
shows the same reasoning twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_TAGS = ("think", "thinking", "thought", "reasoning", "REASONING_SCRATCHPAD")
# A block is an opener, the text up to the first matching closer, and the space after it.
# Openers are found here and closers searched with str.find-like scans (see _blocks): one
# `<tag>(.*?)</tag>` regex retried every opener against the rest of the text, quadratic in a
# reply of many unclosed openers (a 1 MB one held the event loop for an hour).
_OPEN = re.compile(r"<(?P<tag>" + "|".join(_TAGS) + r")>", re.IGNORECASE)
_CLOSE = {tag.lower(): re.compile(rf"</{tag}>\s*", re.IGNORECASE) for tag in _TAGS}
MAX_MERGED_PARTS = 64  # more parts than this are deduplicated by equality only (pairwise is quadratic)
# A block opened but never closed (output cut at max_tokens): the rest is reasoning.
_UNCLOSED = re.compile(r"<(?P<tag>" + "|".join(_TAGS) + r")>(?P<body>.*)\Z", re.DOTALL | re.IGNORECASE)
# A close tag with no opener: the opener was in the chat template (the model's output starts
# inside the block), so everything before it is reasoning.
_STRAY_CLOSE = re.compile(r"\A(?P<body>.*?)</(?:" + "|".join(_TAGS) + r")>\s*", re.DOTALL | re.IGNORECASE)
_DETAIL_KEYS = ("summary", "thinking", "content", "text")


def _details_text(details: Any) -> list[str]:
    if not isinstance(details, list):
        return []
    texts = []
    for item in details:
        if not isinstance(item, dict):
            continue
        for key in _DETAIL_KEYS:
            value = item.get(key)
            if isinstance(value, str) and value.strip():
                texts.append(value.strip())
                break
    return texts


def merge_parts(parts: Iterable[str]) -> list[str]:
    """Reasoning parts in order, each once: a part inside another is dropped (past
    MAX_MERGED_PARTS parts, only a copy of an earlier one)."""
    parts = [p for p in parts if p]
    if len(parts) > MAX_MERGED_PARTS:
        return list(dict.fromkeys(parts))
    seen: list[str] = []
    for part in parts:
        if part and not any(part == s or part in s for s in seen):
            seen = [s for s in seen if s not in part] + [part]
    return seen


def _blocks(content: str) -> tuple[list[str], str]:
    """Closed blocks' bodies, and `content` without them, in time linear in its length: a
    tag whose closer is missing after one opener is missing after every later one."""
    found: list[str] = []
    kept: list[str] = []
    unclosed: set[str] = set()
    start = 0
    for opener in _OPEN.finditer(content):
        tag = opener.group("tag").lower()
        if opener.start() < start or tag in unclosed:
            continue  # inside a block already taken, or no closer left for this tag
        closer = _CLOSE[tag].search(content, opener.end())
        if closer is None:
            unclosed.add(tag)
            continue
        found.append(content[opener.end() : closer.start()].strip())
        kept.append(content[start : opener.start()])
        start = closer.end()
    kept.append(content[start:])
    return found, "".join(kept)


def split_inline(content: str) -> tuple[list[str], str]:
    """Inline reasoning blocks found in `content`, and the content without them."""
    found, cleaned = _blocks(content)
    stray = _STRAY_CLOSE.match(cleaned)
    if stray:
        found.insert(0, stray.group("body").strip())
        cleaned = cleaned[stray.end() :]
    tail = _UNCLOSED.search(cleaned)
    if tail:
        found.append(tail.group("body").strip())
        cleaned = cleaned[: tail.start()]
    return [f for f in found if f], cleaned.strip()


def extract(fields: dict[str, Any], content: str | None) -> tuple[str | None, str]:
    """(reasoning, content) from an assistant message's extra fields and its content."""
    native = [
        v.strip() for v in (fields.get("reasoning"), fields.get("reasoning_content")) if isinstance(v, str)
    ]
    native += _details_text(fields.get("reasoning_details"))
    inline, cleaned = split_inline(content or "")
    parts = merge_parts([p for p in native + inline if p])
    return ("\n\n".join(parts) if parts else None), cleaned
