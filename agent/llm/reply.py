"""Reading a chat-completions response body into our `ModelReply`, whatever the endpoint sent.

An error the endpoint reports inside a 200 reply (OpenRouter does, once a model has started: the
body's `error`, or a choice's `error` and `finish_reason: "error"`) is `ErrorInReply`, which the
client classifies by its code as the HTTP status it stands for (retrying 5xx and 429).
Anything else that is not a completion with at least one choice is an invalid response
(`ModelAPIError(FailureClass.INVALID_RESPONSE)`, never retried): malformed or too deeply nested JSON,
a message or a tool-call list of the wrong type, or more tool calls than any model emits in
one turn (each would run in the sandbox, one after the other). Fields we only carry along
(ids, names, finish reason, token counts) are coerced to their type rather than trusted.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agent.common.unicode_text import encodable_json, may_hold_surrogates
from agent.errors import FailureClass, ModelAPIError
from agent.llm import reasoning
from agent.llm.tokens import TokenReplyError, find_api
from agent.protocols import ModelReply, ToolCall, Usage
from agent.protocols.tokens import TokenCapture

# Parallel tool calls come by the handful; OpenAI caps a request at 128 tools. A reply with
# more calls than this is a broken or hostile endpoint, not a plan worth running.
MAX_TOOL_CALLS = 256


class _NotACompletion(ValueError):
    pass


class ErrorInReply(Exception):
    """An error the endpoint reported in a reply's body; `status_code` is its code, where it
    gave a number (None: none given, taken as the provider's failure)."""

    def __init__(self, status_code: int | None, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


def _reported(error: Any) -> ErrorInReply:
    fields = error if isinstance(error, dict) else {}
    code = fields.get("code")
    if isinstance(code, str) and code.isascii() and code.isdigit():
        code = int(code)
    status = code if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599 else None
    message = fields.get("message")
    said = str(message)[:300] if message else json.dumps(error, ensure_ascii=False, default=str)[:300]
    return ErrorInReply(status, f"the endpoint reported an error in its reply (code {code!r}): {said}")


def _text_of(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts (as some
    endpoints send it), joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _tool_calls(message: dict[str, Any]) -> tuple[ToolCall, ...]:
    listed = message.get("tool_calls") or []
    if not isinstance(listed, list):
        raise _NotACompletion(f"tool_calls is not a list (got {type(listed).__name__})")
    if len(listed) > MAX_TOOL_CALLS:
        raise _NotACompletion(f"{len(listed)} tool calls in one reply (at most {MAX_TOOL_CALLS} are run)")
    calls = []
    for i, call in enumerate(listed):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        name, arguments = function.get("name") or "", function.get("arguments") or ""
        call_id = call.get("id")
        calls.append(
            ToolCall(
                call_id if isinstance(call_id, str) and call_id else f"call_{i}", str(name), str(arguments)
            )
        )
    return tuple(calls)


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _details(usage: dict[str, Any], name: str, key: str) -> int:
    details = usage.get(name)
    return _count(details, key) if isinstance(details, dict) else 0


def _cost(usage: dict[str, Any]) -> float | None:
    """The provider's own price of the call in USD (OpenRouter's `usage.cost`), when it says."""
    cost = usage.get("cost")
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0:
        return None
    return float(cost)


def read_usage(usage: dict[str, Any]) -> Usage:
    """Token counts, cached prompt tokens and the provider-reported cost of one reply."""
    return Usage(
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        reasoning_tokens=_details(usage, "completion_tokens_details", "reasoning_tokens"),
        cached_tokens=_details(usage, "prompt_tokens_details", "cached_tokens"),
        cost_usd=_cost(usage),
    )


def _message(raw: bytes) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(completion, its first choice, that choice's message); ValueError, LookupError or
    TypeError when the body is no chat completion."""
    completion = json.loads(raw)
    if may_hold_surrogates(raw):  # a lone one would fail the next request of the conversation
        completion = encodable_json(completion)
    if isinstance(completion, dict) and completion.get("error") and not completion.get("choices"):
        raise _reported(completion["error"])
    choice = completion["choices"][0]
    if isinstance(choice, dict) and (choice.get("finish_reason") == "error" or choice.get("error")):
        raise _reported(choice.get("error") or completion.get("error"))
    message = choice["message"]
    if not isinstance(message, dict):
        raise TypeError("message is not an object")
    return completion, choice, message


def _tokens(api: str, completion: dict[str, Any], choice: dict[str, Any]) -> TokenCapture:
    """The ids and logprobs a reply to a request in token API `api` must carry."""
    try:
        return find_api(api).read(completion, choice)
    except TokenReplyError as exc:  # not retried: the same server answers the same way
        raise ModelAPIError(FailureClass.INVALID_RESPONSE, f"the endpoint ({api} token API) {exc}") from None


def parse_reply(raw: bytes, token_api: str | None = None) -> ModelReply:
    """Our `ModelReply` from a chat-completions response body; with `token_api` (the request
    asked for ids in that API's fields) its `tokens`, or an invalid_response without them."""
    try:
        completion, choice, message = _message(raw)
        calls = _tool_calls(message)
    except RecursionError:
        raise ModelAPIError(
            FailureClass.INVALID_RESPONSE, "not a chat completion (JSON nested too deeply)"
        ) from None
    except (ValueError, LookupError, TypeError) as exc:
        shown = raw[:200].decode("utf-8", "replace")
        raise ModelAPIError(FailureClass.INVALID_RESPONSE, f"not a chat completion ({exc}): {shown}") from exc
    text, content = reasoning.extract(message, _text_of(message.get("content")))
    usage = completion.get("usage")
    finish = choice.get("finish_reason")
    tokens = None if token_api is None else _tokens(token_api, completion, choice)
    return ModelReply(
        content=content,
        reasoning=text,
        tool_calls=calls,
        finish_reason=finish if isinstance(finish, str) and finish else "stop",
        usage=read_usage(usage if isinstance(usage, dict) else {}),
        reasoning_details=message.get("reasoning_details") or None,
        # Not OpenAI's: our embedded server says its grammar forced the reasoning (its words or
        # its presence), so coverage statistics can tell it from reasoning the model chose.
        reasoning_forced=message.get("reasoning_forced") is True,
        tokens=tokens,
    )
