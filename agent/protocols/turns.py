"""A conversation as typed turns: what the loop keeps, what every export reads.

The loop builds these from its typed replies (`ModelReply`, `ToolCall`) and what it already
knows rides on the turn: reasoning separated from content (or forced by the endpoint's
grammar), the ids it renamed so a turn's calls are unique, each call's parsed arguments,
whether a tool result reports a failure. Nothing downstream derives them again.

OpenAI-shaped messages exist only at the edges, through the functions here: `to_openai_message`
renders a turn as the history keeps it (the request to the model and `AIAgent`'s result
dict are made from it), `from_openai_message(s)` reads a history from elsewhere back, refusing
what is not a message with `MalformedMessage`. The history form carries our own keys (below),
so a history we wrote reads back into the same turns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.protocols.tokens import TurnTokens

# The history form's own keys: reasoning and content separated (by the loop), reasoning forced
# by the endpoint's output grammar, {id given to a call: the id the model sent}, a message
# the agent injected itself (not part of the conversation).
SEPARATED = "_reasoning_separated"
FORCED_REASONING = "_reasoning_forced"
RENAMED_CALL_IDS = "_renamed_call_ids"
INJECTED = "_injected"


class MalformedMessage(ValueError):
    """A message from elsewhere that is not an OpenAI chat message; says which and why."""


@dataclass(frozen=True)
class SystemTurn:
    content: str


@dataclass(frozen=True)
class UserTurn:
    content: str | tuple[Mapping[str, object], ...]  # text, or multimodal parts as sent
    injected: bool = False

    @property
    def text(self) -> str:
        """The text; of multimodal content, its text parts (no base64 blobs)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")


@dataclass(frozen=True)
class TurnCall:
    """One tool call of an assistant turn, its arguments parsed once."""

    id: str  # unique within its turn (the loop renames a repeated one)
    name: str
    raw_arguments: str  # the JSON string the model emitted
    arguments: Mapping[str, object]  # parsed; {} when `argument_error` says why not
    argument_error: str | None = None
    model_id: str | None = None  # the id the model sent, when the loop renamed it

    @property
    def sent_id(self) -> str:
        return self.id if self.model_id is None else self.model_id


@dataclass(frozen=True)
class AssistantTurn:
    content: str | None
    reasoning: str | None
    calls: tuple[TurnCall, ...] = ()
    reasoning_separated: bool = True  # False (a history from elsewhere): content may hold it inline
    reasoning_forced: bool = False
    reasoning_details: tuple[object, ...] | None = None  # signed reasoning, sent back as is
    truncated: bool = False  # cut at max_tokens
    injected: bool = False
    tokens: TurnTokens | None = None  # the call's tokens (--capture_tokens), see agent.protocols.tokens


@dataclass(frozen=True)
class ToolTurn:
    call_id: str
    name: str | None
    content: str
    error: bool  # the result reports a failure (`is_failure`, the rule of agent.export.tool_stats)
    injected: bool = False


Turn = SystemTurn | UserTurn | AssistantTurn | ToolTurn


def parse_arguments(raw: str) -> tuple[Mapping[str, object], str | None]:
    """(arguments, None), or ({}, what is wrong) when `raw` is no JSON object; no arguments
    at all ("") are an empty object."""
    if not raw.strip():
        return {}, None
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        return {}, f"arguments are not valid JSON ({exc})"
    if not isinstance(parsed, dict):
        return {}, "arguments are not a JSON object"
    return parsed, None


def turn_call(call_id: str, name: str, raw: str, model_id: str | None = None) -> TurnCall:
    arguments, problem = parse_arguments(raw)
    return TurnCall(call_id, name, raw, arguments, problem, model_id)


def result_value(content: object) -> object:
    """A tool result's JSON value, or None when it is not JSON (plain text)."""
    if not isinstance(content, str):
        return None
    try:
        return json.loads(content)
    except ValueError:
        return None


def is_failure(content: object) -> bool:
    """Whether a tool result's content reports a failure (see `agent.export.tool_stats`)."""
    if not isinstance(content, str):
        return content is None
    if not content.strip():
        return True
    value = result_value(content)
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


def tool_turn(call_id: str, name: str | None, content: str) -> ToolTurn:
    return ToolTurn(call_id, name, content, is_failure(content))


# ---------------------------------------------------------------- the edge: OpenAI messages


def to_openai_message(turn: Turn) -> dict[str, Any]:
    """`turn` as the history keeps it: an OpenAI chat message plus our own keys (above)."""
    if isinstance(turn, AssistantTurn):
        return _to_openai_assistant(turn)
    if isinstance(turn, ToolTurn):
        message: dict[str, Any] = {"role": "tool", "tool_call_id": turn.call_id}
        message |= {"name": turn.name} if turn.name is not None else {}
        message["content"] = turn.content
    elif isinstance(turn, UserTurn):
        content = turn.content
        message = {
            "role": "user",
            "content": content if isinstance(content, str) else [dict(p) for p in content],
        }
    else:
        return {"role": "system", "content": turn.content}
    return message | {INJECTED: True} if turn.injected else message


def _to_openai_assistant(turn: AssistantTurn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.reasoning_separated or turn.reasoning is not None:
        message["reasoning"] = turn.reasoning
    if turn.reasoning_separated:
        message[SEPARATED] = True
    if turn.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
            for c in turn.calls
        ]
    if renamed := {c.id: c.model_id for c in turn.calls if c.model_id is not None}:
        message[RENAMED_CALL_IDS] = renamed
    if turn.reasoning_details:
        message["reasoning_details"] = list(turn.reasoning_details)
    if turn.reasoning_forced:
        message[FORCED_REASONING] = True
    if turn.truncated:
        message["truncated"] = True
    return message | {INJECTED: True} if turn.injected else message


def to_openai_messages(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    return [to_openai_message(turn) for turn in turns]


def from_openai_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[Turn, ...]:
    """The turns of a history from elsewhere; `MalformedMessage` names the first message that
    is not an OpenAI chat message."""
    turns = []
    for index, message in enumerate(messages):
        try:
            turns.append(from_openai_message(message))
        except MalformedMessage as exc:
            raise MalformedMessage(f"message {index}: {exc}") from None
    return tuple(turns)


def from_openai_message(message: Mapping[str, Any]) -> Turn:
    """One message as a turn (keys we do not know are ignored)."""
    if not isinstance(message, Mapping):
        raise MalformedMessage(f"not an object: {message!r:.80}")
    role, content, injected = message.get("role"), message.get("content"), bool(message.get(INJECTED))
    if role == "assistant":
        return _assistant_turn(message, injected)
    if role == "tool":
        call_id = _string(message, "tool_call_id")
        name = message.get("name")
        if not isinstance(name, str | None) or not isinstance(content, str | None):
            raise MalformedMessage("a tool message's name and content must be strings")
        return ToolTurn(call_id, name, content or "", is_failure(content), injected)
    if role == "user":
        if isinstance(content, list) and all(isinstance(p, Mapping) for p in content):
            return UserTurn(tuple(content), injected)
        if not isinstance(content, str):
            raise MalformedMessage(f"a user message's content is no text or list of parts: {content!r:.80}")
        return UserTurn(content, injected)
    if role == "system":
        return SystemTurn(_string(message, "content"))
    raise MalformedMessage(f"unknown role {role!r}")


def _assistant_turn(message: Mapping[str, Any], injected: bool) -> AssistantTurn:
    content, reasoning = message.get("content"), message.get("reasoning")
    if not isinstance(content, str | None) or not isinstance(reasoning, str | None):
        raise MalformedMessage("an assistant message's content and reasoning must be strings")
    renamed = message.get(RENAMED_CALL_IDS) or {}
    listed = message.get("tool_calls") or []
    if not isinstance(listed, list) or not isinstance(renamed, Mapping):
        raise MalformedMessage(
            f"an assistant message's tool_calls must be a list, {RENAMED_CALL_IDS} an object"
        )
    details = message.get("reasoning_details")
    return AssistantTurn(
        content,
        reasoning,
        tuple(_call(call, renamed) for call in listed),
        reasoning_separated=bool(message.get(SEPARATED)),
        reasoning_forced=bool(message.get(FORCED_REASONING)),
        reasoning_details=tuple(details) if isinstance(details, list) and details else None,
        truncated=bool(message.get("truncated")),
        injected=injected,
    )


def _call(call: object, renamed: Mapping[str, str]) -> TurnCall:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        raise MalformedMessage(f"a tool call is no object with a function: {call!r:.80}")
    function = call["function"]
    name, raw = _string(function, "name"), function.get("arguments")
    if isinstance(raw, Mapping):  # some producers send the object itself
        raw = json.dumps(raw)
    if not isinstance(raw, str | None):
        raise MalformedMessage(f"tool call arguments are no JSON string: {raw!r:.80}")
    call_id = _string(call, "id")
    return turn_call(call_id, name, raw or "", renamed.get(call_id))


def _string(message: Mapping[str, Any], key: str) -> str:
    value = message.get(key)
    if not isinstance(value, str):
        raise MalformedMessage(f"{key!r} is no string: {value!r:.80}")
    return value
