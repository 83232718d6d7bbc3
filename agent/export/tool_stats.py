"""Tool-call accounting for one conversation: calls, successes and failures per tool.

Calls are counted from the assistant turns' calls; each result is matched to a call of the turn
before it by `tool_call_id`, the first call still open with that id (results that answer no
call are ignored; calls without a result count only toward `count`). A result is a failure
iff it is empty, or a JSON object that says so through the tool's own error channel: a
non-null `"error"`, `"success": false`, or a `"results"` list whose every item has a non-null
`"error"` (web_extract answering each URL with why it could not). Anything else — plain
text, JSON arrays, some of several URLs failing — is a success: the tool did its job. A
command that ran and exited non-zero is a success of `terminal` (grep finding nothing exits
1), counted apart as its `nonzero_exit`.

Whether a result is a failure is decided once, when its turn is made (`ToolTurn.error`); the
counting happens in the one pass of `agent.export.analysis` (a batch entry takes its
`tool_stats` from there); these are the entry points for a history on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agent.export.analysis import ToolCounts, analyse, is_failure
from agent.protocols.turns import AssistantTurn, Turn

__all__ = ["ToolCounts", "is_failure", "tool_stats", "unknown_tools_called"]


def tool_stats(
    turns: Sequence[Turn], all_tools: Iterable[str]
) -> tuple[dict[str, ToolCounts], dict[str, int]]:
    """(`{tool: {"count", "success", "failure"}}` (terminal: and "nonzero_exit"),
    `{tool: failures}`), keys sorted by name; every tool of `all_tools` is present, plus any
    other name the model called."""
    analysis = analyse(turns, all_tools)
    return analysis.tool_stats, analysis.tool_errors


def unknown_tools_called(turns: Sequence[Turn], valid: set[str]) -> set[str]:
    """Names the model called that are not in `valid` (hallucinated or not offered)."""
    return {
        call.name
        for turn in turns
        if isinstance(turn, AssistantTurn) and not turn.injected
        for call in turn.calls
        if call.name not in valid
    }
