"""Tool-call accounting for one conversation: calls, successes and failures per tool.

Calls are counted from assistant `tool_calls`; each result is matched to a call of the turn
before it by `tool_call_id`, the first call still open with that id (results that answer no
call are ignored; calls without a result count only toward `count`). A result is a failure
iff it is a JSON object with a non-null `"error"` or
with `"success": false`, or it is empty. Anything else — plain text, JSON arrays, a command
that exited non-zero but ran — is a success: the tool did its job.

The counting happens in the one pass of `agent.export.analysis` (a batch entry takes its
`tool_stats` from there); these are the entry points for a history on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.export.analysis import ToolCounts, analyse, calls_of, is_failure

__all__ = ["ToolCounts", "is_failure", "tool_stats", "unknown_tools_called"]


def tool_stats(
    messages: Sequence[Mapping[str, Any]], all_tools: Iterable[str]
) -> tuple[dict[str, ToolCounts], dict[str, int]]:
    """(`{tool: {"count", "success", "failure"}}`, `{tool: failures}`), keys sorted by name;
    every tool of `all_tools` is present, plus any other name the model called."""
    analysis = analyse(messages, all_tools)
    return analysis.tool_stats, analysis.tool_errors


def unknown_tools_called(messages: Sequence[Mapping[str, Any]], valid: set[str]) -> set[str]:
    """Names the model called that are not in `valid` (hallucinated or not offered)."""
    return {
        name
        for message in messages
        if message.get("role") == "assistant" and not message.get("_injected")
        for name in (call.name for call in calls_of(message))
        if name not in valid
    }
