"""Tool-call accounting for one conversation: calls, successes and failures per tool.

Calls are counted from assistant `tool_calls`; each result is matched to its call by
`tool_call_id` (results that answer no call are ignored; calls without a result count only
toward `count`). A result is a failure iff it is a JSON object with a non-null `"error"` or
with `"success": false`, or it is empty. Anything else — plain text, JSON arrays, a command
that exited non-zero but ran — is a success: the tool did its job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

ToolCounts = dict[str, int]


def _calls(messages: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """(call id, tool name) of every tool call the model made, in order."""
    for message in messages:
        if message.get("role") != "assistant" or message.get("_injected"):
            continue
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


def tool_stats(
    messages: Sequence[Mapping[str, Any]], all_tools: Iterable[str]
) -> tuple[dict[str, ToolCounts], dict[str, int]]:
    """(`{tool: {"count", "success", "failure"}}`, `{tool: failures}`), keys sorted by name.

    Every tool of `all_tools` is present (zeros when unused), plus any other name the model
    called, so rows share one schema when loaded as a dataset."""
    calls = list(_calls(messages))
    pending = dict(calls)  # call id -> name, until its first result
    stats = {name: {"count": 0, "success": 0, "failure": 0} for name in all_tools}
    for _, name in calls:
        stats.setdefault(name, {"count": 0, "success": 0, "failure": 0})["count"] += 1
    for message in messages:
        if message.get("role") != "tool" or message.get("_injected"):
            continue
        answered = pending.pop(str(message.get("tool_call_id")), None)
        if answered is not None:  # a second result for the same call is not counted twice
            stats[answered]["failure" if is_failure(message.get("content")) else "success"] += 1
    ordered = {name: stats[name] for name in sorted(stats)}
    return ordered, {name: counts["failure"] for name, counts in ordered.items()}


def unknown_tools_called(messages: Sequence[Mapping[str, Any]], valid: set[str]) -> set[str]:
    """Names the model called that are not in `valid` (hallucinated or not offered)."""
    return {name for _, name in _calls(messages) if name not in valid}
