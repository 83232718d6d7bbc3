"""What the simulated model says: scripted `Turn`s, the default policies, and the reply dicts.

Owns the shape of a simulated reply (content, reasoning in each provider style, raw tool
calls, usage) and the default behaviour of `agent.servers.simulated.server`: pick an offered tool
with valid arguments, then answer mentioning the tool's result.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.servers.faults import EndpointFault

POLICIES = ("tool_then_answer", "answer")
REASONING_STYLES = ("field", "reasoning_content", "reasoning_details", "think_inline", "scratchpad", "none")
REASONING_FIELDS = ("reasoning", "reasoning_content", "reasoning_details")
_INLINE_TAGS = {"think_inline": "think", "scratchpad": "REASONING_SCRATCHPAD"}
_FIELD_OF_STYLE = {"field": "reasoning", "reasoning_content": "reasoning_content"}
# The first of these that is offered is called: a tool that works on its own (navigate before
# click, search before extract); one of each toolset, so every toolset's runs call a tool.
_PREFERRED_TOOLS = (
    "terminal",
    "write_file",
    "read_file",
    "search_files",
    "web_search",
    "browser_navigate",
    "vision_analyze",
    "image_generate",
    "mixture_of_agents",
    "web_extract",
    "process",
)
DEFAULT_TOOL_URL = "https://example.com"  # the page url-taking tools are sent to (tool_url)
# A 1x1 red PNG: an image every vision backend can read without a network.
RED_PIXEL = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
# Argument values a simulated model picks for well-known parameter names.
_KNOWN_ARGS: dict[str, Any] = {
    "command": "echo hello",
    "path": "hello.txt",
    "content": "hello\n",
    "pattern": "hello",
    "query": "hello",
    "image_url": RED_PIXEL,
    "question": "What is in this image?",
    "prompt": "a red circle on a white background",
    "user_prompt": "Is 17 a prime number?",
    "ref": "@e1",
    "text": "hello",
    "key": "Enter",
    "action": "list",
}
_BY_TYPE: dict[str, Any] = {"string": "example", "integer": 1, "number": 1, "boolean": True, "array": []}


@dataclass(frozen=True)
class Turn:
    """One scripted assistant reply, or (with `fault`) one scripted failure."""

    content: str = ""
    reasoning: str | None = None
    reasoning_field: str = "reasoning"  # or "reasoning_content", "reasoning_details"
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, raw arguments: may be malformed on purpose)
    finish_reason: str | None = None  # default: "tool_calls" with tool calls, else "stop"
    delay: float = 0.0  # seconds, on top of the endpoint's latency
    fault: EndpointFault | None = None

    def __post_init__(self) -> None:
        if self.reasoning_field not in REASONING_FIELDS:
            raise ValueError(f"reasoning_field must be one of {REASONING_FIELDS}")


def policy_turn(
    policy: str,
    style: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    tool_url: str = DEFAULT_TOOL_URL,
) -> Turn:
    """The default model: call one offered tool first (tool_then_answer), then answer."""
    replied = any(message.get("role") == "assistant" for message in messages)
    if policy == "tool_then_answer" and not replied and any("function" in tool for tool in tools):
        name, arguments = choose_tool_call(tools, tool_url)
        reasoning = f"The task needs the {name} tool; I will call it before answering."
        return styled_turn("", reasoning, style, ((name, json.dumps(arguments)),))
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        result = _text(last.get("content"))[:200]
        content = f"The tool returned: {result}\nThat completes the task."
        reasoning = f"The tool result was {result!r}; I can now give the final answer."
    else:
        content = f"Here is my answer to: {first_user_text(messages)[:200]}"
        reasoning = "This needs no tools; I can answer directly."
    return styled_turn(content, reasoning, style)


def _text(content: Any) -> str:
    """Message content as text: a plain string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def first_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The first user message's text: what identifies a conversation to the scripts."""
    return next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")


def choose_tool_call(
    tools: Sequence[Mapping[str, Any]], tool_url: str = DEFAULT_TOOL_URL
) -> tuple[str, dict[str, Any]]:
    """Pick an offered function tool (a preferred one when offered) and valid arguments for it;
    url parameters get `tool_url`."""
    functions = {tool["function"]["name"]: tool["function"] for tool in tools if "function" in tool}
    name = next((n for n in _PREFERRED_TOOLS if n in functions), next(iter(functions)))
    parameters = functions[name].get("parameters") or {}
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    known = {**_KNOWN_ARGS, "url": tool_url, "urls": [tool_url]}
    arguments: dict[str, Any] = {}
    for key in parameters.get("required") or []:
        schema = properties.get(key) or {}
        if key in known:
            arguments[key] = known[key]
        elif schema.get("enum"):
            arguments[key] = schema["enum"][0]
        else:
            kind = schema.get("type", "string")
            kind = kind[0] if isinstance(kind, list) and kind else kind  # e.g. ["string", "null"]
            arguments[key] = _BY_TYPE.get(kind, {}) if isinstance(kind, str) else "example"
    return name, arguments


def styled_turn(
    content: str, reasoning: str, style: str, tool_calls: tuple[tuple[str, str], ...] = ()
) -> Turn:
    """A turn carrying `reasoning` the way a provider with reasoning `style` sends it."""
    if style == "none":
        return Turn(content=content, tool_calls=tool_calls)
    if style in _INLINE_TAGS:
        tag = _INLINE_TAGS[style]
        return Turn(content=f"<{tag}>\n{reasoning}\n</{tag}>\n{content}", tool_calls=tool_calls)
    field = _FIELD_OF_STYLE.get(style, style)
    return Turn(content=content, reasoning=reasoning, reasoning_field=field, tool_calls=tool_calls)


def build_completion(body: Mapping[str, Any], turn: Turn, default_model: str) -> dict[str, Any]:
    """The non-streaming `chat.completion` dict for `turn` in answer to `body`."""
    # Like real providers: content is null, not "", on a reply that only calls tools.
    content = turn.content if turn.content or not turn.tool_calls else None
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if turn.reasoning is not None:
        details = [{"type": "reasoning.text", "text": turn.reasoning, "format": "unknown", "index": 0}]
        details_field = turn.reasoning_field == "reasoning_details"
        message[turn.reasoning_field] = details if details_field else turn.reasoning
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": n, "arguments": a},
            }
            for n, a in turn.tool_calls
        ]
    finish = turn.finish_reason or ("tool_calls" if turn.tool_calls else "stop")
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or default_model,
        "choices": [choice],
        "usage": usage_of(body, turn),
    }


def usage_of(body: Mapping[str, Any], turn: Turn) -> dict[str, Any]:
    """Rough token counts (4 characters a token), never zero."""
    prompt_chars = len(json.dumps(body.get("messages") or [])) + len(json.dumps(body.get("tools") or []))
    reasoning_chars = len(turn.reasoning or "")
    reply_chars = len(turn.content) + reasoning_chars + sum(len(n) + len(a) for n, a in turn.tool_calls)
    prompt, completion = max(1, prompt_chars // 4), max(1, -(-reply_chars // 4))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "completion_tokens_details": {"reasoning_tokens": reasoning_chars // 4},
    }


def script_slots(turns: Sequence[Turn]) -> tuple[tuple[Turn, ...], ...]:
    """Group turns into one slot per assistant reply: the faults before a reply, then the reply."""
    slots: list[tuple[Turn, ...]] = []
    pending: list[Turn] = []
    for turn in turns:
        pending.append(turn)
        if turn.fault is None:
            slots.append(tuple(pending))
            pending = []
    if pending:
        slots.append(tuple(pending))
    return tuple(slots)
