"""One pass over a conversation's typed turns (`agent.protocols.turns`): what every export needs.

The pass takes each assistant turn's reasoning and content (split by the rule of
`agent.llm.reasoning` only for a turn from elsewhere whose reasoning the loop did not
separate), pairs every tool call with its own result (in order within the turn, so a repeated
id cannot take another call's result) and notes what makes the conversation malformed; the
trajectory formats render from it and the entry's `tool_stats`, has-reasoning and
well-formedness come from it, so no one walks the history or parses reasoning again. What the
loop knew rides on the turns: parsed arguments, renamed ids, forced reasoning, failed results.
Turns the agent injected itself are not part of the conversation and are skipped. How tool
results count is `agent.export.tool_stats`'s documented rule, implemented here.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.llm import reasoning
from agent.protocols.turns import (
    AssistantTurn,
    SystemTurn,
    ToolTurn,
    Turn,
    TurnCall,
    is_failure,
    result_value,
)
from agent.store.tool_counts import NOT_CALLED, NOT_CALLED_EXIT

__all__ = [
    "EXIT_CODE_TOOLS",
    "FLAWS",
    "Analysis",
    "ReasoningStats",
    "ToolCounts",
    "TurnText",
    "analyse",
    "count_tools",
    "exited_nonzero",
    "is_failure",
    "reasoning_stats",
    "tool_names",
]

ToolCounts = dict[str, int]

# What makes a conversation malformed, in the order that decides an entry's one discard reason.
DUPLICATE_CALL_ID = "duplicate_call_id"  # the model gave two calls of one turn the same id
TOOL_NOT_OFFERED = "tool_not_offered"  # the model called a tool its prompt was not offered
INVALID_ARGUMENTS = "invalid_arguments"  # a call's arguments are not a JSON object
LEAKED_TOOL_CALL = "leaked_tool_call"  # `<tool_call>` in a turn's text, with no real call
FLAWS = (DUPLICATE_CALL_ID, TOOL_NOT_OFFERED, INVALID_ARGUMENTS, LEAKED_TOOL_CALL)
# The tools whose results carry a command's exit code: their stats also count `nonzero_exit`.
EXIT_CODE_TOOLS = frozenset({"terminal"})
_LEAK = re.compile(r"<tool_call>", re.IGNORECASE)


@dataclass(frozen=True)
class TurnText:
    """An assistant turn's merged reasoning ("" when none) and its content without inline blocks."""

    reasoning: str
    content: str


@dataclass(frozen=True)
class ReasoningStats:
    assistant_turns: int
    turns_with_reasoning: int
    turns_with_forced_reasoning: int = 0  # of those, forced by the endpoint's output grammar

    @property
    def turns_without_reasoning(self) -> int:
        return self.assistant_turns - self.turns_with_reasoning

    @property
    def has_any_reasoning(self) -> bool:
        return self.turns_with_reasoning > 0


@dataclass(frozen=True)
class Analysis:
    turns: Mapping[int, TurnText]  # assistant turns by position in the history
    tool_stats: dict[str, ToolCounts]
    tool_errors: dict[str, int]
    reasoning: ReasoningStats
    flaws: tuple[str, ...] = ()  # what makes the conversation malformed, in `FLAWS` order


@dataclass
class _Pass:
    """The state of one walk over the history."""

    offered: Collection[str] | None
    turns: dict[int, TurnText] = field(default_factory=dict)
    forced: int = 0  # turns with reasoning the endpoint's grammar forced
    names: list[str] = field(default_factory=list)  # every call's tool name
    answered: list[tuple[str, ToolTurn]] = field(default_factory=list)  # (the call's tool name, result)
    open: list[TurnCall] = field(default_factory=list)  # the last turn's calls awaiting results
    flaws: set[str] = field(default_factory=set)

    def assistant(self, index: int, turn: AssistantTurn) -> None:
        text = self.turns[index] = turn_text(turn)
        self.forced += bool(text.reasoning and turn.reasoning_forced)
        self.open = list(turn.calls)
        self.names += [c.name for c in self.open]
        if not self.open and _LEAK.search(text.content):
            self.flaws.add(LEAKED_TOOL_CALL)
        sent = [c.sent_id for c in self.open]
        if len(set(sent)) < len(sent):
            self.flaws.add(DUPLICATE_CALL_ID)
        if self.offered is not None and any(c.name not in self.offered for c in self.open):
            self.flaws.add(TOOL_NOT_OFFERED)
        if any(c.argument_error for c in self.open):
            self.flaws.add(INVALID_ARGUMENTS)

    def result(self, turn: ToolTurn) -> None:
        """The first open call with the result's id takes it; a result for none is ignored."""
        for position, call in enumerate(self.open):
            if call.id == turn.call_id:
                del self.open[position]
                self.answered.append((call.name, turn))
                return


def analyse(
    turns: Sequence[Turn],
    all_tools: Iterable[str] = (),
    offered: Collection[str] | None = None,
) -> Analysis:
    """The analysis of `turns`; `all_tools` are the tools `tool_stats` lists even when unused,
    `offered` the tools the conversation was offered (None: not checked)."""
    walk = _Pass(offered)
    for index, turn in enumerate(turns):
        if isinstance(turn, SystemTurn) or turn.injected:
            continue
        if isinstance(turn, AssistantTurn):
            walk.assistant(index, turn)
        elif isinstance(turn, ToolTurn):
            walk.result(turn)
        else:  # a new user turn: the last turn's calls get no more results
            walk.open = []
    stats, errors = count_tools(walk.names, walk.answered, all_tools)
    with_reasoning = sum(1 for text in walk.turns.values() if text.reasoning)
    flaws = tuple(flaw for flaw in FLAWS if flaw in walk.flaws)
    reasoning_stats = ReasoningStats(len(walk.turns), with_reasoning, walk.forced)
    return Analysis(walk.turns, stats, errors, reasoning_stats, flaws)


def reasoning_stats(turns: Sequence[Turn]) -> ReasoningStats:
    """Assistant turns (injected ones excluded) and how many carry reasoning, native or inline."""
    return analyse(turns).reasoning


def turn_text(turn: AssistantTurn) -> TurnText:
    """Reasoning and content of one assistant turn; the loop has separated them already, a
    history from elsewhere may not have."""
    native = (turn.reasoning or "").strip()
    content = turn.content or ""
    if turn.reasoning_separated:
        return TurnText(native, content.strip())
    parts, content = reasoning.separate([native], content)
    return TurnText("\n\n".join(parts), content)


def tool_names(tool_schemas: Iterable[Mapping[str, Any]]) -> set[str]:
    """The names of function schemas or API tool definitions (`{"type": "function", ...}`)."""
    functions = (s.get("function", s) if s.get("type") == "function" else s for s in tool_schemas)
    return {str(fn.get("name")) for fn in functions}


def exited_nonzero(content: str) -> bool:
    """Whether a command ran and exited non-zero (`exit_code`, no `error`): not a failure of the
    tool (grep finding nothing exits 1), counted apart as `nonzero_exit`."""
    value = result_value(content)
    if not isinstance(value, dict) or value.get("error") is not None:
        return False
    code = value.get("exit_code")
    return type(code) is int and code != 0


def _zero(name: str) -> ToolCounts:
    """A tool's row before its calls are counted: the not-called row the counting skips whole."""
    return dict(NOT_CALLED_EXIT if name in EXIT_CODE_TOOLS else NOT_CALLED)


def count_tools(
    names: Sequence[str], answered: Iterable[tuple[str, ToolTurn]], all_tools: Iterable[str]
) -> tuple[dict[str, ToolCounts], dict[str, int]]:
    """(`{tool: {"count", "success", "failure"}}`, `{tool: failures}`), keys sorted by name, from
    the tool name of every call and `(tool name, result)` of every answered call.

    Every tool of `all_tools` is present (zeros when unused), plus any other name the model
    called, so rows share one schema when loaded as a dataset; the tools of `EXIT_CODE_TOOLS`
    also count `nonzero_exit`, the successes whose command exited non-zero."""
    stats = {name: _zero(name) for name in all_tools}
    for name in names:
        stats.setdefault(name, _zero(name))["count"] += 1
    for name, result in answered:
        stats[name]["failure" if result.error else "success"] += 1
        if not result.error and name in EXIT_CODE_TOOLS and exited_nonzero(result.content):
            stats[name]["nonzero_exit"] += 1
    ordered = {name: stats[name] for name in sorted(stats)}
    return ordered, {name: counts["failure"] for name, counts in ordered.items()}
