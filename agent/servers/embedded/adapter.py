"""The mapping between OpenAI chat requests and a small model forced to answer in JSON.

A 135M model does not call tools on its own, so every turn is constrained by a JSON schema
that allows exactly two shapes: a tool call `{"reasoning", "tool", "arguments"}` over the
offered tools, or a final answer `{"reasoning", "answer"}`. This module owns which shapes a
turn allows, the schema and request built for llama.cpp (the prompt itself is rendered by
`agent.servers.embedded.prompt`), and the way the model's JSON becomes a normal assistant message
again. It is pure: no I/O, no llama.cpp import.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.servers.embedded.prompt import render_messages

_Body = dict[str, Any]


@dataclass(frozen=True)
class AdapterPolicy:
    """Knobs of the adapter, in tool rounds (tool-call turns since the last user message).
    Before `min_tool_rounds` only tool calls are offered: a 135M model answering from
    memory only makes things up. From `max_tool_rounds` on only the final answer is
    offered, so it cannot loop on tool calls forever. The defaults give the demo's shape:
    one tool call, then an answer that reads its result."""

    min_tool_rounds: int = 1
    max_tool_rounds: int = 1
    reasoning_max_chars: int = 160
    answer_max_chars: int = 200
    argument_max_chars: int = 120
    tool_result_max_chars: int = 1500
    required_args_only: bool = True


def tool_rounds(messages: list[dict[str, Any]]) -> int:
    """Tool-call turns whose results came back since the last user message."""
    rounds = 0
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        if message.get("role") == "assistant" and message.get("tool_calls"):
            rounds += 1
    return rounds


@dataclass(frozen=True)
class TurnPlan:
    """The shapes allowed this turn: calls of `tools`, and a final answer if `answer`."""

    tools: list[dict[str, Any]]
    answer: bool


def functions_of(body: _Body) -> list[dict[str, Any]]:
    return [t["function"] for t in body.get("tools") or [] if t.get("type", "function") == "function"]


def plan_turn(body: _Body, policy: AdapterPolicy) -> TurnPlan:
    rounds = tool_rounds(body.get("messages", []))
    functions = functions_of(body)
    choice = body.get("tool_choice")
    if not functions or choice == "none" or rounds >= policy.max_tool_rounds:
        return TurnPlan(tools=[], answer=True)
    if isinstance(choice, dict):  # {"type": "function", "function": {"name": ...}}: that tool only
        named = (choice.get("function") or {}).get("name")
        return TurnPlan(tools=[f for f in functions if f["name"] == named] or functions, answer=False)
    return TurnPlan(tools=functions, answer=rounds >= policy.min_tool_rounds and choice != "required")


def arguments_schema(function: dict[str, Any], policy: AdapterPolicy) -> dict[str, Any]:
    """The tool's parameter schema, trimmed to its required properties: optional knobs
    (timeouts, background flags) are what a tiny model fills with junk."""
    params = dict(function.get("parameters") or {"type": "object", "properties": {}})
    properties: dict[str, Any] = dict(params.get("properties") or {})
    required = [name for name in params.get("required") or [] if name in properties]
    if policy.required_args_only and required:
        properties = {name: properties[name] for name in required}
    # A tiny model can repeat itself forever inside a string; cap every free string.
    properties = {
        name: {"maxLength": policy.argument_max_chars, **prop} if prop.get("type") == "string" else prop
        for name, prop in properties.items()
    }
    return {
        **params,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _reasoning_schema(policy: AdapterPolicy, tool: str | None = None) -> dict[str, Any]:
    """A short reasoning string. In a tool branch it must begin "I will use the <tool> tool
    to", so the tool is chosen while the model states its plan and cannot disagree with it.
    The "the" matters (measured, 10/12 right tools against 7/12 without it): after a bare
    "I will use " the model wants a command name ("pwd"), and the grammar then forces its
    first letter into whichever tool shares it ("patch")."""
    schema: dict[str, Any] = {"type": "string", "minLength": 8, "maxLength": policy.reasoning_max_chars}
    if tool is not None:
        schema["pattern"] = f"^I will use the {re.escape(tool)} tool to .+$"
    return schema


def _tool_call_schema(function: dict[str, Any], policy: AdapterPolicy) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "reasoning": _reasoning_schema(policy, function["name"]),
            "tool": {"const": function["name"]},
            "arguments": arguments_schema(function, policy),
        },
        "required": ["reasoning", "tool", "arguments"],
        "additionalProperties": False,
    }


def turn_schema(plan: TurnPlan, policy: AdapterPolicy) -> dict[str, Any]:
    """The JSON schema of one assistant turn: a call of one offered tool, or an answer."""
    answer = {
        "type": "object",
        "properties": {
            "reasoning": _reasoning_schema(policy),
            "answer": {"type": "string", "minLength": 1, "maxLength": policy.answer_max_chars},
        },
        "required": ["reasoning", "answer"],
        "additionalProperties": False,
    }
    branches = [_tool_call_schema(function, policy) for function in plan.tools]
    if plan.answer:
        branches.append(answer)
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _arguments_bound(function: dict[str, Any], policy: AdapterPolicy) -> int:
    properties = arguments_schema(function, policy)["properties"]
    # Strings are capped; other values (numbers, flags) are short.
    return sum(int(p.get("maxLength", 32)) + len(name) + 8 for name, p in properties.items())


def output_bound(plan: TurnPlan, policy: AdapterPolicy) -> int:
    """Enough tokens for the longest turn the schema allows (a token is at least one
    character), so a valid turn is never cut at max_tokens."""
    longest = max((_arguments_bound(f, policy) + len(f["name"]) for f in plan.tools), default=0)
    if plan.answer:
        longest = max(longest, policy.answer_max_chars)
    return policy.reasoning_max_chars + longest + 64


# Sampling fields llama.cpp's server reads, passed as they came (--model_seed, --top_p and
# --sampling_extra or a row's `sampling`). `stop` is not: the reply is a JSON turn under a
# grammar, which a stop string would cut into an unreadable one.
PASSED_SAMPLING = (
    "seed", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
)  # fmt: skip


class RequestRefused(ValueError):
    """A request the embedded model cannot serve as asked (its server answers HTTP 400)."""


def unsent_sampling(stop: tuple[str, ...], extra: Mapping[str, Any]) -> str | None:
    """Why a sampling flag would be recorded as sent and never reach llama.cpp; None: all do."""
    if stop:
        return "--stop: the embedded model takes none (its replies are JSON turns under a grammar)"
    unknown = sorted(set(extra) - set(PASSED_SAMPLING))
    if unknown:
        return (
            f"--sampling_extra: the embedded model reads only {', '.join(PASSED_SAMPLING)}; "
            f"not {', '.join(unknown)}"
        )
    return None


def build_llama_request(body: _Body, policy: AdapterPolicy) -> _Body:
    """The chat request for llama.cpp: our prompt, the turn schema, no `tools` field.
    Raises RequestRefused for a `stop` (a row's own sampling can ask one): dropping it would
    leave the entry saying it was sent."""
    if body.get("stop"):
        raise RequestRefused(
            "stop is not supported: the embedded model's replies are JSON turns under a grammar, "
            "which a stop string would cut (remove the row's sampling.stop)"
        )
    plan = plan_turn(body, policy)
    messages = render_messages(
        body.get("messages", []),
        answer_only=not plan.tools,
        known=functions_of(body),
        tool_result_max_chars=policy.tool_result_max_chars,
        arguments_schema=lambda f: arguments_schema(f, policy),
    )
    requested = body.get("max_completion_tokens") or body.get("max_tokens")
    bound = output_bound(plan, policy)
    max_tokens = min(int(requested), bound) if requested else bound
    request: _Body = {
        "messages": messages,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "assistant_turn", "strict": True, "schema": turn_schema(plan, policy)},
        },
        "temperature": 0.0 if body.get("temperature") is None else body["temperature"],
        "max_tokens": max_tokens,
        "stream": False,
    }
    request.update({key: body[key] for key in PASSED_SAMPLING if body.get(key) is not None})
    return request


def _prior_call_count(messages: list[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")


def parse_turn(text: str, tool_names: set[str], first_call: int) -> dict[str, Any]:
    """The assistant message for the model's output. Output that is not one of the two shapes
    (a turn cut at max_tokens mid-JSON) has no answer: empty content, never the raw JSON as
    if the model had answered with it; a malformed turn must never crash.

    The grammar made the model write its reasoning (every turn must carry one, and a tool
    turn's opens with "I will use the <tool> tool to"), so a message with reasoning says so in
    `reasoning_forced` (not an OpenAI field): statistics count it apart from reasoning a model
    writes of its own accord."""
    try:
        turn = json.loads(text)
    except ValueError:
        turn = None
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    if not isinstance(turn, dict):
        return message
    reasoning = turn.get("reasoning")
    if isinstance(reasoning, str) and reasoning.strip():
        message["reasoning"] = reasoning.strip()
        message["reasoning_forced"] = True
    if turn.get("tool") in tool_names and isinstance(turn.get("arguments"), dict):
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": f"call_{first_call}",
                "type": "function",
                "function": {
                    "name": turn["tool"],
                    "arguments": json.dumps(turn["arguments"], ensure_ascii=False),
                },
            }
        ]
    elif isinstance(turn.get("answer"), str):
        message["content"] = turn["answer"]
    return message


def _usage(llama_response: _Body) -> dict[str, int]:
    usage = llama_response.get("usage") or {}
    prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def build_response(body: _Body, llama_response: _Body) -> _Body:
    """The OpenAI `chat.completion` for the incoming `body`, from llama.cpp's response."""
    choice = (llama_response.get("choices") or [{}])[0]
    text = str((choice.get("message") or {}).get("content") or "")
    names = {f["name"] for f in functions_of(body)}
    message = parse_turn(text, names, _prior_call_count(body.get("messages", [])) + 1)
    finish = "tool_calls" if message.get("tool_calls") else str(choice.get("finish_reason") or "stop")
    return {
        "id": str(llama_response.get("id") or "chatcmpl-embedded"),
        "object": "chat.completion",
        "created": int(llama_response.get("created") or 0),
        "model": str(body.get("model") or llama_response.get("model") or "embedded"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _usage(llama_response),
    }
