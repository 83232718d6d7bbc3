"""Tool-call accounting for one conversation: calls, successes and failures per tool.

Calls are counted from assistant `tool_calls`; each result is matched to its call by
`tool_call_id` (results that answer no call are ignored; calls without a result count only
toward `count`). A result is a failure iff it is a JSON object with a non-null `"error"` or
with `"success": false`, or it is empty. Anything else — plain text, JSON arrays, a command
that exited non-zero but ran — is a success: the tool did its job.

The history is walked once, by `agent.export.analysis`; this module counts what it collected.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

ToolCounts = dict[str, int]


def calls_of(message: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(call id, tool name) of every tool call of one assistant message, in order."""
    for call in message.get("tool_calls") or []:
        if isinstance(call, Mapping):
            fn = call.get("function") or {}
            yield str(call.get("id")), str(fn.get("name"))


def is_failure(content: Any) -> bool:
    """Whether a tool result's content reports a failure (see the module docstring)."""
    if not isinstance(content, str):
        return content is None
    if not content.strip():
        return True
    try:
        value = json.loads(content)
    except ValueError:
        return False
    return isinstance(value, dict) and (value.get("error") is not None or value.get("success") is False)


def count_tools(
    calls: Sequence[tuple[str, str]], results: Iterable[tuple[str, Any]], all_tools: Iterable[str]
) -> tuple[dict[str, ToolCounts], dict[str, int]]:
    """(`{tool: {"count", "success", "failure"}}`, `{tool: failures}`), keys sorted by name, from
    the conversation's calls `(id, name)` and results `(tool_call_id, content)`.

    Every tool of `all_tools` is present (zeros when unused), plus any other name the model
    called, so rows share one schema when loaded as a dataset."""
    pending = dict(calls)  # call id -> name, until its first result
    stats = {name: {"count": 0, "success": 0, "failure": 0} for name in all_tools}
    for _, name in calls:
        stats.setdefault(name, {"count": 0, "success": 0, "failure": 0})["count"] += 1
    for call_id, content in results:
        answered = pending.pop(call_id, None)
        if answered is not None:  # a second result for the same call is not counted twice
            stats[answered]["failure" if is_failure(content) else "success"] += 1
    ordered = {name: stats[name] for name in sorted(stats)}
    return ordered, {name: counts["failure"] for name, counts in ordered.items()}


def unknown_tools_called(messages: Sequence[Mapping[str, Any]], valid: set[str]) -> set[str]:
    """Names the model called that are not in `valid` (hallucinated or not offered)."""
    return {
        name
        for message in messages
        if message.get("role") == "assistant" and not message.get("_injected")
        for _, name in calls_of(message)
        if name not in valid
    }
