"""Reasoning capture: one place that separates a model's reasoning from its answer.

Providers return reasoning in fields (`reasoning`, `reasoning_content`, `reasoning_details`)
or inline (a `<think>`, `<thinking>`, `<REASONING_SCRATCHPAD>`… block in the content). We keep
it once, in `reasoning`, and remove the inline block from the content, so the trajectory never
shows the same reasoning twice.

Which inline text is reasoning (anything else is the answer's own words, kept verbatim):
- a block that OPENS the content (leading whitespace aside), up to its closer, or to the end
  when it never closes (output cut at max_tokens);
- else, text before a close tag that comes before any open tag: the opener was in the chat
  template, so the output started inside the block.
Only that one block: the same tags later in the content (an answer explaining `<think>`, a
second block) stay in the answer. When the provider returned reasoning in a field, nothing in
the content is reasoning, except a leading block that repeats that reasoning (a copy some
providers send both ways), which is removed as a copy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_TAGS = ("think", "thinking", "thought", "reasoning", "REASONING_SCRATCHPAD")
# The first of our tags in the content, open or close; a closer is then one str.find-like scan,
# so the split is linear in the reply's length whatever it holds.
_FIRST_TAG = re.compile(r"<(?P<close>/?)(?P<tag>" + "|".join(_TAGS) + r")>", re.IGNORECASE)
_CLOSE = {tag.lower(): re.compile(rf"</{tag}>", re.IGNORECASE) for tag in _TAGS}
MAX_MERGED_PARTS = 64  # more parts than this are deduplicated by equality only (pairwise is quadratic)
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


def _leading_block(content: str) -> tuple[str, str] | None:
    """(body, rest) of the reasoning block the content starts with, or None (see the module)."""
    first = _FIRST_TAG.search(content)
    if first is None:
        return None
    if first.group("close"):  # opened by the chat template: everything before it is reasoning
        return content[: first.start()], content[first.end() :]
    if content[: first.start()].strip():
        return None  # the tag is inside the answer, not at its start
    closer = _CLOSE[first.group("tag").lower()].search(content, first.end())
    if closer is None:  # never closed (cut at max_tokens): the rest is reasoning
        return content[first.end() :], ""
    return content[first.end() : closer.start()], content[closer.end() :]


def split_inline(content: str) -> tuple[list[str], str]:
    """The inline reasoning block found in `content` (as a list: empty, or its one body), and
    the content without it; only a block at the start counts (see the module)."""
    block = _leading_block(content)
    if block is None:
        return [], content.strip()
    body, rest = block
    return ([body.strip()] if body.strip() else []), rest.strip()


def separate(native: Iterable[str], content: str) -> tuple[list[str], str]:
    """(reasoning parts, answer) of a turn whose fields carried `native` reasoning and whose
    content is `content`: the inline block counts only without native reasoning, or when it
    repeats it (an empty block is removed either way)."""
    native = [n.strip() for n in native if n and n.strip()]
    inline, cleaned = split_inline(content)
    if native and not all(any(i in n or n in i for n in native) for i in inline):
        inline, cleaned = [], content.strip()  # the block is new text: the answer's own words
    return merge_parts(native + inline), cleaned


def extract(fields: dict[str, Any], content: str | None) -> tuple[str | None, str]:
    """(reasoning, content) from an assistant message's extra fields and its content."""
    native = [v for v in (fields.get("reasoning"), fields.get("reasoning_content")) if isinstance(v, str)]
    native += _details_text(fields.get("reasoning_details"))
    parts, cleaned = separate(native, content or "")
    return ("\n\n".join(parts) if parts else None), cleaned
