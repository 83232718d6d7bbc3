"""ShareGPT conversations as OpenAI chat messages plus their tool schemas, and back.

The trajectory entries hold ShareGPT turns (`agent.export.sharegpt`); trainers (TRL, axolotl,
LLaMA-Factory) read OpenAI-style `messages` + `tools`. This module reads the turns our
converter writes and gives back the structured history it was made from:
- the system turn is the Hermes template for the offered tools: it becomes `tools` (the full
  schemas, parsed from the turn, checked by regenerating it byte for byte) and no message,
  since chat templates render `tools` themselves; any other system text stays a system message;
- each `gpt` turn's ONE think block becomes `reasoning_content` (or stays inline as
  `<think>…</think>` in `content`, `inline=True`), its `<tool_call>` blocks `tool_calls` with
  `arguments` as a JSON string (the OpenAI shape);
- each `<tool_response>` becomes a `tool` message with its `tool_call_id` and `name`; a call's
  id is the id of the result that answers it (ShareGPT keeps ids only on results), calls
  without a result get `call_<turn>_<n>`.
The way back renders the messages through `sharegpt.convert`, the one ShareGPT writer, so
ShareGPT → messages → ShareGPT gives back the same turns for every conversation our converter
writes. A `<tool_call>` block counts as a call only when its line is exactly what the converter
writes (so text that merely mentions the tag stays text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from agent.common.identity_memo import IdentityMemo
from agent.export.analysis import Analysis
from agent.export.sharegpt import convert, hermes_system_message
from agent.protocols.turns import SEPARATED, Turn, from_openai_messages

__all__ = ["FORMAT", "Conversation", "OpenAIFormat", "from_sharegpt", "to_sharegpt", "tools_json"]

# The edge: an OpenAI message as the export writes it (every key present, see `message`).
Message = dict[str, Any]
_THINK = re.compile(r"\A<think>\n(?:(.*?)\n)?</think>(?:\n|\Z)", re.DOTALL)
_ROLES = {"human": "user", "gpt": "assistant", "tool": "tool", "system": "system"}


@dataclass(frozen=True)
class Conversation:
    """A conversation as OpenAI messages and the tool schemas (API tool definitions) offered."""

    messages: list[Message]
    tools: list[Mapping[str, Any]]


class ParsedCall(NamedTuple):
    """A `<tool_call>` block of a `gpt` turn."""

    name: str
    arguments: Mapping[str, object]


class ToolResponse(NamedTuple):
    """A `<tool_response>` block of a `tool` turn (its values as the JSON line has them)."""

    tool_call_id: object
    name: object
    content: object


def message(role: str, content: str | None, **fields: Any) -> Message:
    """One message with every key present (None where it does not apply), so every row of an
    export has the same message struct and Arrow infers one schema for the whole file."""
    base: Message = {"role": role, "content": content, "reasoning_content": None}
    base.update(tool_calls=None, tool_call_id=None, name=None)
    base.update(fields)
    return base


@lru_cache(maxsize=64)  # a run offers few tool sets: each system turn is parsed once
def tools_of_system(value: str) -> list[Mapping[str, Any]] | None:
    """The API tool definitions a Hermes system turn lists, or None when `value` is not exactly
    the template our converter writes for them. The same list for the same turn: read-only."""
    start, end = value.find("<tools>\n"), value.rfind("\n</tools>")
    if start < 0 or end < start:
        return None
    try:
        listed = json.loads(value[start + len("<tools>\n") : end])
    except ValueError:
        return None
    if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
        return None
    tools: list[Mapping[str, Any]] = [
        {"type": "function", "function": {k: t.get(k) for k in ("name", "description", "parameters")}}
        for t in listed
    ]
    return tools if hermes_system_message(tools) == value else None


def _block(lines: Sequence[str], keys: tuple[str, ...], tag: str) -> Mapping[str, object] | None:
    """The payload of a `<tag>` block whose JSON line is byte for byte what the converter writes."""
    if len(lines) != 3 or lines[0] != f"<{tag}>" or lines[2] != f"</{tag}>":
        return None
    try:
        payload = json.loads(lines[1])
    except ValueError:
        return None
    if not isinstance(payload, dict) or tuple(payload) != keys or json.dumps(payload) != lines[1]:
        return None
    return payload


def split_gpt(value: str) -> tuple[str, str, list[ParsedCall]]:
    """(reasoning, content, calls) of a `gpt` turn."""
    think = _THINK.match(value)
    reasoning = (think.group(1) or "") if think else ""
    lines = value[think.end() :].split("\n") if think else value.split("\n")
    calls: list[ParsedCall] = []
    while len(lines) >= 3:
        call = _block(lines[-3:], ("name", "arguments"), "tool_call")
        if call is None or not isinstance(call["name"], str) or not isinstance(call["arguments"], dict):
            break
        calls.insert(0, ParsedCall(call["name"], call["arguments"]))
        lines = lines[:-3]
    return reasoning, "\n".join(lines), calls


def split_tool(value: str, turn: int) -> list[ToolResponse]:
    """The `<tool_response>` blocks of the `tool` turn `turn`, in order."""
    lines = value.split("\n")
    if len(lines) % 3:
        raise ValueError(f"turn {turn}: a tool turn is not a sequence of <tool_response> blocks")
    found = []
    for at in range(0, len(lines), 3):
        payload = _block(lines[at : at + 3], ("tool_call_id", "name", "content"), "tool_response")
        if payload is None:
            raise ValueError(f"turn {turn}: block {at // 3 + 1} is no <tool_response> as we write it")
        found.append(ToolResponse(payload["tool_call_id"], payload["name"], payload["content"]))
    return found


def _assistant(reasoning: str, content: str, calls: list[ParsedCall], inline: bool) -> Message:
    tool_calls = [
        {
            "id": "",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c in calls
    ]
    if inline:
        think = f"<think>\n{reasoning}\n</think>\n" if reasoning else "<think>\n</think>\n"
        return message("assistant", think + content, tool_calls=tool_calls or None)
    return message("assistant", content, reasoning_content=reasoning or None, tool_calls=tool_calls or None)


def _answer_calls(assistant: Message | None, results: list[ToolResponse], turn: int) -> None:
    """Give each call of `assistant` the id of the result that answers it: the first call, in
    order, with the result's tool name and no id yet."""
    calls = (assistant or {}).get("tool_calls") or []
    for result in results:
        call = next((c for c in calls if not c["id"] and c["function"]["name"] == result.name), None)
        if call is None:
            raise ValueError(f"turn {turn}: result {result.tool_call_id!r} answers no call before it")
        call["id"] = str(result.tool_call_id)


def _name_unanswered(assistant: Message | None, turn: int) -> None:
    """The calls no result answered (a truncated or interrupted turn) get `call_<turn>_<n>`."""
    for number, call in enumerate((assistant or {}).get("tool_calls") or []):
        if not call["id"]:
            call["id"] = f"call_{turn}_{number}"


def _tool_message(result: ToolResponse) -> Message:
    content = result.content
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return message("tool", text, tool_call_id=str(result.tool_call_id), name=result.name)


def from_sharegpt(turns: Sequence[Mapping[str, Any]], *, inline: bool = False) -> Conversation:
    """The OpenAI messages and tools of ShareGPT `turns`; ValueError names the turn that is not
    ShareGPT as our converter writes it."""
    messages: list[Message] = []
    tools: list[Mapping[str, Any]] = []
    last: tuple[Message | None, int] = (None, 0)  # the last assistant message and its turn
    for turn, item in enumerate(turns):
        role, value = _ROLES.get(str(item.get("from"))), item.get("value")
        if role is None or not isinstance(value, str):
            raise ValueError(f"turn {turn}: 'from' {item.get('from')!r} or its value is not ShareGPT")
        if role == "tool":
            results = split_tool(value, turn)
            _answer_calls(last[0], results, turn)
            messages += [_tool_message(result) for result in results]
            continue
        _name_unanswered(*last)
        if role == "assistant":
            last = (_assistant(*split_gpt(value), inline), turn)
            messages.append(last[0])
        elif role == "system" and turn == 0 and (parsed := tools_of_system(value)) is not None:
            tools = parsed
        else:
            messages.append(message(role, value))
    _name_unanswered(*last)
    return Conversation(messages, tools)


def _internal(item: Mapping[str, Any], inline: bool) -> Message:
    """An export message in the history form (`agent.protocols.turns`), for the one adapter."""
    found = {k: v for k, v in item.items() if v is not None and k != "reasoning_content"}
    if item.get("role") == "assistant" and not inline:
        found.update(reasoning=item.get("reasoning_content") or "", **{SEPARATED: True})
    return found


def to_sharegpt(conversation: Conversation, *, inline: bool = False) -> list[dict[str, str]]:
    """The ShareGPT turns of OpenAI messages (`inline`: reasoning is in the content)."""
    system = [m for m in conversation.messages if m.get("role") == "system"]
    rest = [_internal(m, inline) for m in conversation.messages if m.get("role") != "system"]
    turns = convert(from_openai_messages(rest), conversation.tools).conversations
    if system:
        turns[0] = {"from": "system", "value": str(system[0].get("content") or "")}
    return turns


def _tools_json(tools: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(tools), ensure_ascii=False)


_tools_text = IdentityMemo(_tools_json, size=64)


def tools_json(tools: Sequence[Mapping[str, Any]]) -> str:
    """`tools` as the one JSON string a row holds: JSON Schemas differ from tool to tool, and an
    Arrow struct would pad every schema with the others' keys as nulls (the form TRL reads).
    Made once for the same (read-only) schema objects, as `tools_of_system` returns them."""
    return _tools_text(tools)


class OpenAIFormat:
    """The format as the registry sees it: the entry's `messages` and `tools` (a JSON string),
    made through the ShareGPT turns so both formats of one conversation always agree."""

    name = "openai"

    def render(
        self, turns: Sequence[Turn], tool_schemas: Sequence[Mapping[str, Any]], analysis: Analysis
    ) -> Mapping[str, object]:
        conversation = from_sharegpt(convert(turns, tool_schemas, analysis).conversations)
        return {"messages": conversation.messages, "tools": tools_json(conversation.tools)}


FORMAT = OpenAIFormat()
