"""The ShareGPT trajectory format: a conversation's typed turns as ShareGPT turns.

One format of the registry in `agent.export.formats`. The conversion follows
/work/shared/spec/trajectory-format.md and fixes the reference's fidelity bugs:
- every `gpt` turn has exactly ONE think block: native `reasoning` and any inline
  `<think>` / `<REASONING_SCRATCHPAD>` blocks left in the content are merged (W-TRAJ-1);
- tool names in tool turns come from the call with the same `tool_call_id`, not from the
  result's position (W-TRAJ-4); when a turn repeats an id, its results answer its calls in
  order, so each call gets its own;
- turns the agent injected itself never appear (W-TRAJ-2);
- nothing is dropped silently: invalid call arguments, orphan results and calls without
  results are reported in `ShareGPT.warnings` (and logged). (A history from elsewhere whose
  messages are malformed is refused earlier, by `agent.protocols.turns.from_openai_messages`.)
JSON inside `<tool_call>` / `<tool_response>` uses `json.dumps` defaults (ASCII escapes), as
the reference does, so our rows are byte-compatible with its datasets.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.common.identity_memo import IdentityMemo
from agent.export.analysis import Analysis, analyse
from agent.protocols.turns import AssistantTurn, SystemTurn, ToolTurn, Turn, TurnCall, UserTurn

__all__ = ["FORMAT", "ShareGPT", "ShareGPTFormat", "convert", "hermes_system_message", "to_sharegpt"]

log = logging.getLogger(__name__)

_SYSTEM_HEAD = (
    "You are a function calling AI model. You are provided with function signatures within "
    "<tools> </tools> XML tags. You may call one or more functions to assist with the user query. "
    "If available tools are not relevant in assisting with user query, just respond in natural "
    "conversational language. Don't make assumptions about what values to plug into functions. "
    "After calling & executing the functions, you will be provided with function results within "
    "<tool_response> </tool_response> XML tags. Here are the available tools:\n<tools>\n"
)
_SYSTEM_TAIL = (
    "\n</tools>\nFor each function call return a JSON object, with the following pydantic model "
    "json schema for each:\n{'title': 'FunctionCall', 'type': 'object', 'properties': {'name': "
    "{'title': 'Name', 'type': 'string'}, 'arguments': {'title': 'Arguments', 'type': 'object'}}, "
    "'required': ['name', 'arguments']}\nEach function call should be enclosed within <tool_call> "
    "</tool_call> XML tags.\nExample:\n<tool_call>\n{'name': <function-name>,'arguments': "
    "<args-dict>}\n</tool_call>"
)


def _make_system_message(tool_schemas: Sequence[Mapping[str, Any]]) -> str:
    tools = []
    for schema in tool_schemas:
        fn = schema.get("function", schema) if schema.get("type") == "function" else schema
        tools.append(
            {
                "name": fn.get("name"),
                "description": fn.get("description"),
                "parameters": fn.get("parameters"),
                "required": None,
            }
        )
    return _SYSTEM_HEAD + json.dumps(tools, ensure_ascii=False) + _SYSTEM_TAIL


_system_messages = IdentityMemo(_make_system_message)


def hermes_system_message(tool_schemas: Sequence[Mapping[str, Any]]) -> str:
    """The spec's function-calling system turn for these tools, in the given order (made
    once for the same schema objects).

    Accepts function schemas (`{"name", "description", "parameters"}`) or API tool
    definitions (`{"type": "function", "function": schema}`)."""
    return _system_messages(tool_schemas)


@dataclass(frozen=True)
class ShareGPT:
    conversations: list[dict[str, str]]
    warnings: list[str] = field(default_factory=list)


class _Converter:
    """One pass over the history; keeps the calls of the last assistant turn for its results."""

    def __init__(self, tool_schemas: Sequence[Mapping[str, Any]], analysis: Analysis) -> None:
        self.analysis = analysis
        self.turns: list[dict[str, str]] = [{"from": "system", "value": hermes_system_message(tool_schemas)}]
        self.warnings: list[str] = []
        self.open_calls: list[tuple[str, str]] = []  # (call id, tool name) awaiting results, in order
        self.results: list[str] = []

    def warn(self, text: str) -> None:
        log.warning("trajectory: %s", text)
        self.warnings.append(text)

    def feed(self, index: int, turn: Turn) -> None:
        if isinstance(turn, SystemTurn) or turn.injected:
            return
        if isinstance(turn, ToolTurn):
            self.tool(turn)
            return
        self.close_tool_turn()
        if isinstance(turn, UserTurn):
            self.turns.append({"from": "human", "value": turn.text})
        else:
            self.assistant(index, turn)

    def assistant(self, index: int, turn: AssistantTurn) -> None:
        text = self.analysis.turns[index]
        reasoning, content = text.reasoning, text.content
        think = f"<think>\n{reasoning}\n</think>\n" if reasoning else "<think>\n</think>\n"
        if not turn.calls:
            self.turns.append({"from": "gpt", "value": (think + content).strip()})
            return
        value = think + (content + "\n" if content else "")
        for call in turn.calls:
            self.open_calls.append((call.id, call.name))
            payload = {"name": call.name, "arguments": self.arguments(call)}
            value += f"<tool_call>\n{json.dumps(payload)}\n</tool_call>\n"
        self.turns.append({"from": "gpt", "value": value.rstrip()})

    def arguments(self, call: TurnCall) -> Mapping[str, object]:
        if call.argument_error:
            self.warn(
                f"tool call {call.name!r}: {call.argument_error}; saved as {{}}: {call.raw_arguments!r}"
            )
        return call.arguments

    def tool(self, turn: ToolTurn) -> None:
        call_id = turn.call_id
        position = next((i for i, (open_id, _) in enumerate(self.open_calls) if open_id == call_id), None)
        if position is None:
            self.warn(f"tool result {call_id!r} does not answer the preceding assistant turn; dropped")
            return
        _, name = self.open_calls.pop(position)
        payload = {"tool_call_id": call_id, "name": name, "content": _content(turn.content)}
        self.results.append(f"<tool_response>\n{json.dumps(payload)}\n</tool_response>")

    def close_tool_turn(self) -> None:
        if self.results:
            self.turns.append({"from": "tool", "value": "\n".join(self.results)})
        for call_id, name in self.open_calls:
            self.warn(f"tool call {call_id!r} ({name}) has no result")
        self.results, self.open_calls = [], []


def _content(raw: str) -> object:
    """Tool output embedded as JSON when it is a JSON object or array, else as the raw string."""
    if raw.strip()[:1] in ("{", "["):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def convert(
    turns: Sequence[Turn],
    tool_schemas: Sequence[Mapping[str, Any]],
    analysis: Analysis | None = None,
) -> ShareGPT:
    """ShareGPT turns for a conversation's turns, plus what was lost; `analysis` is
    `analyse(turns)` when the caller has it already."""
    converter = _Converter(tool_schemas, analysis or analyse(turns))
    for index, turn in enumerate(turns):
        converter.feed(index, turn)
    converter.close_tool_turn()
    return ShareGPT(converter.turns, converter.warnings)


def to_sharegpt(turns: Sequence[Turn], tool_schemas: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The conversations of `convert` (its warnings are logged; use `convert` to keep them)."""
    return convert(turns, tool_schemas).conversations


class ShareGPTFormat:
    """The format as the registry sees it: the entry's `conversations` field."""

    name = "sharegpt"

    def render(
        self, turns: Sequence[Turn], tool_schemas: Sequence[Mapping[str, Any]], analysis: Analysis
    ) -> Mapping[str, object]:
        return {"conversations": convert(turns, tool_schemas, analysis).conversations}


FORMAT = ShareGPTFormat()
