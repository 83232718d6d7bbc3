"""One pass over a conversation's structured (OpenAI-style) messages: what every export needs.

The pass splits each assistant turn into its reasoning and its content once (by the rule of
`agent.llm.reasoning`), pairs every tool call with its own result (in order within the turn,
so a repeated id cannot take another call's result) and notes what makes the conversation
malformed; the trajectory formats render from it and the entry's `tool_stats`, has-reasoning
and well-formedness come from it, so no one walks the history or parses reasoning again.
Messages the agent injected itself (`"_injected": True`) are not part of the conversation
and are skipped. How tool results count is `agent.export.tool_stats`'s documented rule,
implemented here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agent.llm import reasoning

__all__ = [
    "EXIT_CODE_TOOLS",
    "FLAWS",
    "FORCED_REASONING",
    "RENAMED_CALL_IDS",
    "SEPARATED",
    "Analysis",
    "Call",
    "ReasoningStats",
    "ToolCounts",
    "TurnText",
    "analyse",
    "count_tools",
    "exited_nonzero",
    "is_failure",
    "parse_arguments",
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
# An assistant message's field, set by the loop: {id it gave a call: the id the model sent}.
RENAMED_CALL_IDS = "_renamed_call_ids"
# Set by the loop on the assistant messages it keeps: reasoning and content are separated.
SEPARATED = "_reasoning_separated"
# Set by the loop on an assistant message whose reasoning the endpoint's output grammar forced
# (the embedded server's: every turn must carry one, a tool turn's opens with its template).
FORCED_REASONING = "_reasoning_forced"
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
    turns: Mapping[int, TurnText]  # assistant messages by position in the history
    tool_stats: dict[str, ToolCounts]
    tool_errors: dict[str, int]
    reasoning: ReasoningStats
    flaws: tuple[str, ...] = ()  # what makes the conversation malformed, in `FLAWS` order


class Call(NamedTuple):
    """One tool call of an assistant message, as the history holds it."""

    id: str
    name: str
    arguments: Any  # raw: a JSON string, usually


@dataclass
class _Pass:
    """The state of one walk over the history."""

    offered: Collection[str] | None
    turns: dict[int, TurnText] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # every call's tool name
    answered: list[tuple[str, Any]] = field(default_factory=list)  # (tool name, result content)
    open: list[Call] = field(default_factory=list)  # the last turn's calls awaiting results
    flaws: set[str] = field(default_factory=set)

    def assistant(self, index: int, message: Mapping[str, Any]) -> None:
        text = self.turns[index] = turn_text(message)
        self.open = list(calls_of(message))
        self.names += [c.name for c in self.open]
        if not self.open and _LEAK.search(text.content):
            self.flaws.add(LEAKED_TOOL_CALL)
        sent = model_call_ids(message)
        if len(set(sent)) < len(sent):
            self.flaws.add(DUPLICATE_CALL_ID)
        if self.offered is not None and any(c.name not in self.offered for c in self.open):
            self.flaws.add(TOOL_NOT_OFFERED)
        if any(parse_arguments(c.arguments)[1] for c in self.open):
            self.flaws.add(INVALID_ARGUMENTS)

    def result(self, message: Mapping[str, Any]) -> None:
        """The first open call with the result's id takes it; a result for none is ignored."""
        call_id = str(message.get("tool_call_id"))
        for position, call in enumerate(self.open):
            if call.id == call_id:
                del self.open[position]
                self.answered.append((call.name, message.get("content")))
                return


def analyse(
    messages: Sequence[Mapping[str, Any]],
    all_tools: Iterable[str] = (),
    offered: Collection[str] | None = None,
) -> Analysis:
    """The analysis of `messages`; `all_tools` are the tools `tool_stats` lists even when unused,
    `offered` the tools the conversation was offered (None: not checked)."""
    walk = _Pass(offered)
    for index, message in enumerate(messages):
        role = message.get("role")
        if message.get("_injected") or role == "system":
            continue
        if role == "assistant":
            walk.assistant(index, message)
        elif role == "tool":
            walk.result(message)
        else:  # a new user turn: the last turn's calls get no more results
            walk.open = []
    stats, errors = count_tools(walk.names, walk.answered, all_tools)
    with_reasoning = sum(1 for turn in walk.turns.values() if turn.reasoning)
    forced = sum(1 for i, turn in walk.turns.items() if turn.reasoning and messages[i].get(FORCED_REASONING))
    flaws = tuple(flaw for flaw in FLAWS if flaw in walk.flaws)
    return Analysis(walk.turns, stats, errors, ReasoningStats(len(walk.turns), with_reasoning, forced), flaws)


def reasoning_stats(messages: Sequence[Mapping[str, Any]]) -> ReasoningStats:
    """Assistant turns (injected ones excluded) and how many carry reasoning, native or inline."""
    return analyse(messages).reasoning


def turn_text(message: Mapping[str, Any]) -> TurnText:
    """Reasoning and content of one assistant message; the loop has separated them already
    (`SEPARATED`), a history from elsewhere may not have."""
    native = message.get("reasoning")
    native = native.strip() if isinstance(native, str) else ""
    content = message.get("content") or ""
    if message.get(SEPARATED):
        return TurnText(native, content.strip())
    parts, content = reasoning.separate([native], content)
    return TurnText("\n\n".join(parts), content)


def calls_of(message: Mapping[str, Any]) -> Iterator[Call]:
    """Every tool call of one assistant message, in order (entries that are no object skipped)."""
    for call in message.get("tool_calls") or []:
        if isinstance(call, Mapping):
            fn = call.get("function") or {}
            yield Call(str(call.get("id")), str(fn.get("name")), fn.get("arguments"))


def model_call_ids(message: Mapping[str, Any]) -> list[str]:
    """The call ids as the model sent them (before the loop made repeated ones unique)."""
    renamed = message.get(RENAMED_CALL_IDS) or {}
    return [renamed.get(call.id, call.id) for call in calls_of(message)]


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """(arguments, None), or ({}, what is wrong) when `raw` is no JSON object; no arguments
    at all (None, "") are an empty object."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    try:
        parsed = json.loads(raw)
    except (TypeError, ValueError) as exc:
        return {}, f"arguments are not valid JSON ({exc})"
    if not isinstance(parsed, dict):
        return {}, "arguments are not a JSON object"
    return parsed, None


def tool_names(tool_schemas: Iterable[Mapping[str, Any]]) -> set[str]:
    """The names of function schemas or API tool definitions (`{"type": "function", ...}`)."""
    functions = (s.get("function", s) if s.get("type") == "function" else s for s in tool_schemas)
    return {str(fn.get("name")) for fn in functions}


def _result_value(content: Any) -> Any:
    """A tool result's JSON value, or None when it is not JSON (plain text)."""
    if not isinstance(content, str):
        return None
    try:
        return json.loads(content)
    except ValueError:
        return None


def is_failure(content: Any) -> bool:
    """Whether a tool result's content reports a failure (see `agent.export.tool_stats`)."""
    if not isinstance(content, str):
        return content is None
    if not content.strip():
        return True
    value = _result_value(content)
    if not isinstance(value, dict):
        return False
    if value.get("error") is not None or value.get("success") is False:
        return True
    items = value.get("results")  # a result per item (web_extract: per URL), each with its error
    return (
        isinstance(items, list)
        and bool(items)
        and all(isinstance(item, dict) and item.get("error") is not None for item in items)
    )


def exited_nonzero(content: Any) -> bool:
    """Whether a command ran and exited non-zero (`exit_code`, no `error`): not a failure of the
    tool (grep finding nothing exits 1), counted apart as `nonzero_exit`."""
    value = _result_value(content)
    if not isinstance(value, dict) or value.get("error") is not None:
        return False
    code = value.get("exit_code")
    return type(code) is int and code != 0


def _zero(name: str) -> ToolCounts:
    counts = {"count": 0, "success": 0, "failure": 0}
    return counts | {"nonzero_exit": 0} if name in EXIT_CODE_TOOLS else counts


def count_tools(
    names: Sequence[str], answered: Iterable[tuple[str, Any]], all_tools: Iterable[str]
) -> tuple[dict[str, ToolCounts], dict[str, int]]:
    """(`{tool: {"count", "success", "failure"}}`, `{tool: failures}`), keys sorted by name, from
    the tool name of every call and `(tool name, result content)` of every answered call.

    Every tool of `all_tools` is present (zeros when unused), plus any other name the model
    called, so rows share one schema when loaded as a dataset; the tools of `EXIT_CODE_TOOLS`
    also count `nonzero_exit`, the successes whose command exited non-zero."""
    stats = {name: _zero(name) for name in all_tools}
    for name in names:
        stats.setdefault(name, _zero(name))["count"] += 1
    for name, content in answered:
        failed = is_failure(content)
        stats[name]["failure" if failed else "success"] += 1
        if not failed and name in EXIT_CODE_TOOLS and exited_nonzero(content):
            stats[name]["nonzero_exit"] += 1
    ordered = {name: stats[name] for name in sorted(stats)}
    return ordered, {name: counts["failure"] for name, counts in ordered.items()}
