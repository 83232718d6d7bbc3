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
_BLOCK = re.compile(
    r"<(?P<tag>" + "|".join(_TAGS) + r")>(?P<body>.*?)</(?P=tag)>\s*",
    re.DOTALL | re.IGNORECASE,
)
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
    """Reasoning parts in order, each once: a part inside another is dropped."""
    seen: list[str] = []
    for part in parts:
        if part and not any(part == s or part in s for s in seen):
            seen = [s for s in seen if s not in part] + [part]
    return seen


def split_inline(content: str) -> tuple[list[str], str]:
    """Inline reasoning blocks found in `content`, and the content without them."""
    found = [m.group("body").strip() for m in _BLOCK.finditer(content)]
    cleaned = _BLOCK.sub("", content)
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
