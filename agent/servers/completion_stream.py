"""Turns one full `chat.completion` dict into the `chat.completion.chunk` stream of the same reply.

Owns how a reply is cut into deltas (role, reasoning, content, tool calls, finish, usage) and
their server-sent-event framing, so any responder gets streaming for free.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

DONE = b"data: [DONE]\n\n"
_ARG_PIECE = 16  # characters of tool-call arguments per chunk
_STREAMED = {"role", "content", "tool_calls", "reasoning", "reasoning_content", "reasoning_details"}


def sse_event(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying `payload` as JSON."""
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def completion_chunks(completion: dict[str, Any], *, include_usage: bool) -> Iterator[dict[str, Any]]:
    """The chunks that stream `completion`; a usage-only chunk last when `include_usage`."""
    base: dict[str, Any] = {key: completion[key] for key in ("id", "created", "model") if key in completion}
    base["object"] = "chat.completion.chunk"

    def chunk(index: int, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**base, "choices": [choice]}

    for choice in completion.get("choices") or []:
        index = choice.get("index", 0)
        for delta in message_deltas(choice.get("message") or {}):
            yield chunk(index, delta)
        yield chunk(index, {}, choice.get("finish_reason") or "stop")
    if include_usage:
        yield {**base, "choices": [], "usage": completion.get("usage")}


def message_deltas(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The deltas of one assistant message, in the order providers send them."""
    content = message.get("content")
    # As OpenAI does: the role delta carries content "" for text replies, null for tool-only ones.
    first: dict[str, Any] = {"role": message.get("role", "assistant"), "content": "" if content else None}
    first.update({k: v for k, v in message.items() if k not in _STREAMED and v is not None})
    yield first
    for key in ("reasoning", "reasoning_content"):
        for piece in _pieces(message.get(key) or ""):
            yield {key: piece}
    for detail in message.get("reasoning_details") or []:
        yield {"reasoning_details": [detail]}
    for piece in _pieces(content or ""):
        yield {"content": piece}
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        head = {"name": function.get("name", ""), "arguments": ""}
        yield {"tool_calls": [{"index": index, "id": call.get("id"), "type": "function", "function": head}]}
        for piece in _pieces(function.get("arguments") or "", _ARG_PIECE):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


def _pieces(text: str, size: int | None = None) -> list[str]:
    """Split text the way a model streams it: word by word, or in fixed slices of `size`."""
    if size is not None:
        return [text[i : i + size] for i in range(0, len(text), size)]
    return [piece for piece in re.findall(r"\S*\s*", text) if piece]
