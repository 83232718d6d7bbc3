"""Tool-call accounting for one conversation: calls, successes and failures per tool.

Calls are counted from assistant `tool_calls`; each result is matched to a call of the turn
before it by `tool_call_id`, the first call still open with that id (results that answer no
call are ignored; calls without a result count only toward `count`). A result is a failure
iff it is empty, or a JSON object that says so through the tool's own error channel: a
non-null `"error"`, `"success": false`, or a `"results"` list whose every item has a non-null
`"error"` (web_extract answering each URL with why it could not). Anything else — plain
text, JSON arrays, some of several URLs failing — is a success: the tool did its job. A
command that ran and exited non-zero is a success of `terminal` (grep finding nothing exits
1), counted apart as its `nonzero_exit`.

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
    """(`{tool: {"count", "success", "failure"}}` (terminal: and "nonzero_exit"),
    `{tool: failures}`), keys sorted by name; every tool of `all_tools` is present, plus any
    other name the model called."""
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
