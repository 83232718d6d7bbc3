"""One pass over a conversation's structured (OpenAI-style) messages: what every export needs.

The pass splits each assistant turn into its reasoning and its content once (native
`reasoning` and inline `<think>`-style blocks merged) and collects the tool calls and results;
the trajectory formats render from it and the entry's `tool_stats` and has-reasoning come
from it, so no one walks the history or parses reasoning again. Messages the agent injected
itself (`"_injected": True`) are not part of the conversation and are skipped. How tool
results count is `agent.export.tool_stats`'s documented rule, implemented here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.llm import reasoning

__all__ = [
    "Analysis",
    "ReasoningStats",
    "ToolCounts",
    "TurnText",
    "analyse",
    "count_tools",
    "is_failure",
    "reasoning_stats",
]

ToolCounts = dict[str, int]


@dataclass(frozen=True)
class TurnText:
    """An assistant turn's merged reasoning ("" when none) and its content without inline blocks."""

    reasoning: str
    content: str


@dataclass(frozen=True)
class ReasoningStats:
    assistant_turns: int
    turns_with_reasoning: int

    @property
    def turns_without_reasoning(self) -> int:
        return self.assistant_turns - self.turns_with_reasoning

    @property
    def has_any_reasoning(self) -> bool:
        return self.turns_with_reasoning > 0


@dataclass(frozen=True)
class Analysis:
    turns: Mapping[int, TurnText]  # assistant messages by position in the history
    tool_stats: dict[str, ToolCounts]
    tool_errors: dict[str, int]
    reasoning: ReasoningStats


def analyse(messages: Sequence[Mapping[str, Any]], all_tools: Iterable[str] = ()) -> Analysis:
    """The analysis of `messages`; `all_tools` are the tools `tool_stats` lists even when unused."""
    turns: dict[int, TurnText] = {}
    calls: list[tuple[str, str]] = []
    results: list[tuple[str, Any]] = []
    for index, message in enumerate(messages):
        if message.get("_injected"):
            continue
        role = message.get("role")
        if role == "assistant":
            turns[index] = turn_text(message)
            calls.extend(calls_of(message))
        elif role == "tool":
            results.append((str(message.get("tool_call_id")), message.get("content")))
    stats, errors = count_tools(calls, results, all_tools)
    with_reasoning = sum(1 for turn in turns.values() if turn.reasoning)
    return Analysis(turns, stats, errors, ReasoningStats(len(turns), with_reasoning))


def reasoning_stats(messages: Sequence[Mapping[str, Any]]) -> ReasoningStats:
    """Assistant turns (injected ones excluded) and how many carry reasoning, native or inline."""
    return analyse(messages).reasoning


def turn_text(message: Mapping[str, Any]) -> TurnText:
    """Reasoning and content of one assistant message; the loop has usually separated them
    already, but a history from elsewhere may not have."""
    native = message.get("reasoning")
    inline, content = reasoning.split_inline(message.get("content") or "")
    parts = reasoning.merge_parts([native.strip() if isinstance(native, str) else "", *inline])
    return TurnText("\n\n".join(parts), content.strip())


def calls_of(message: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(call id, tool name) of every tool call of one assistant message, in order."""
    for call in message.get("tool_calls") or []:
        if isinstance(call, Mapping):
            fn = call.get("function") or {}
            yield str(call.get("id")), str(fn.get("name"))


def is_failure(content: Any) -> bool:
    """Whether a tool result's content reports a failure (see `agent.export.tool_stats`)."""
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
