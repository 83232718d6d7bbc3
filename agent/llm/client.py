"""The chat model over HTTP: the `openai` SDK, our retry policy, reasoning capture.

Retries happen here and only here (the SDK's own retries are off): transient failures
(429, 5xx, timeouts, dropped connections) are retried with jittered exponential backoff that
honours `Retry-After`; everything else fails at once as a `ModelAPIError`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

import httpx2
import openai
from openai._types import RequestOptions

from agent.common.identity_memo import IdentityMemo
from agent.common.unicode_text import encodable_json, may_hold_surrogates
from agent.errors import ModelAPIError
from agent.llm import reasoning
from agent.llm.rate_limit import AdaptiveLimiter
from agent.llm.transport import AiohttpTransport
from agent.protocols import ChatRequest, ModelReply, ToolCall, Usage

log = logging.getLogger(__name__)

BACKOFF_BASE = 1.0
BACKOFF_CAP = 60.0
RETRY_AFTER_CAP = 120.0
HONOURED = 3  # attempts that wait just the server's Retry-After before the backoff grows
_PERMANENT = {
    openai.AuthenticationError: "auth",
    openai.PermissionDeniedError: "auth",
    openai.NotFoundError: "not_found",
    openai.BadRequestError: "bad_request",
    openai.UnprocessableEntityError: "bad_request",
}


def classify(exc: Exception) -> tuple[str, bool]:
    """(error_class, retryable) for an exception raised by the SDK."""
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", True
    if isinstance(exc, openai.APIConnectionError):
        return "connection", True
    if isinstance(exc, openai.RateLimitError):
        return "rate_limit", True
    for kind, name in _PERMANENT.items():
        if isinstance(exc, kind):
            return name, False
    if isinstance(exc, openai.APIStatusError):
        return (
            ("server_error", True)
            if exc.status_code >= 500 or exc.status_code in (408, 409)
            else (
                "bad_request",
                False,
            )
        )
    return "invalid_response", False


def retry_after(exc: Exception) -> float | None:
    """Seconds the server asked us to wait, if it did."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    value = response.headers.get("retry-after")
    try:
        return min(float(value), RETRY_AFTER_CAP) if value is not None else None
    except ValueError:
        return None


def backoff_delay(attempt: int, server_hint: float | None, rng: random.Random) -> float:
    """Full-jitter exponential backoff; when the server gave a Retry-After, the first HONOURED
    retries wait just that, plus up to a quarter more (calls throttled together must not come
    back together), and later ones take it as the backoff's floor. Growing the wait past what
    the server asked for from the first retry made each unlucky call wait seconds under random
    throttling (1+2+4+8 s after four 429s in a row) and stretched whole runs."""
    backoff = rng.uniform(0, min(BACKOFF_CAP, BACKOFF_BASE * 2**attempt))
    if server_hint is None or server_hint <= 0:
        return backoff
    asked = server_hint * rng.uniform(1.0, 1.25)
    return asked if attempt < HONOURED else max(asked, backoff)


def _tool_calls(message: dict[str, Any]) -> tuple[ToolCall, ...]:
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        name, arguments = function.get("name") or "", function.get("arguments") or ""
        calls.append(ToolCall(call.get("id") or f"call_{i}", str(name), str(arguments)))
    return tuple(calls)


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) else 0


def parse_reply(raw: bytes) -> ModelReply:
    """Our `ModelReply` from a chat-completions response body; anything that is not a
    completion with at least one choice is an invalid response."""
    try:
        completion = json.loads(raw)
        if may_hold_surrogates(raw):  # a lone one would fail the next request of the conversation
            completion = encodable_json(completion)
        choice = completion["choices"][0]
        message = choice["message"]
        if not isinstance(message, dict):
            raise TypeError("message is not an object")
    except (ValueError, LookupError, TypeError) as exc:
        shown = raw[:200].decode("utf-8", "replace")
        raise ModelAPIError("invalid_response", f"not a chat completion ({exc}): {shown}") from exc
    content = message.get("content")
    text, content = reasoning.extract(message, content if isinstance(content, str) else "")
    usage = completion.get("usage") if isinstance(completion.get("usage"), dict) else {}
    details = usage.get("completion_tokens_details")
    return ModelReply(
        content=content,
        reasoning=text,
        tool_calls=_tool_calls(message),
        finish_reason=choice.get("finish_reason") or "stop",
        usage=Usage(
            prompt_tokens=_count(usage, "prompt_tokens"),
            completion_tokens=_count(usage, "completion_tokens"),
            reasoning_tokens=_count(details, "reasoning_tokens") if isinstance(details, dict) else 0,
        ),
        reasoning_details=message.get("reasoning_details") or None,
    )


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


_encoded_tools = IdentityMemo(_encode)


class OpenAIChatModel:
    """A `ChatModel` for any OpenAI-compatible endpoint."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float = 600.0,
        max_retries: int = 6,
        limiter: AdaptiveLimiter | None = None,
        max_connections: int = 1000,
        seed: int | None = None,
    ) -> None:
        self.model = model
        self.max_retries = max_retries
        self.limiter = limiter
        self._rng = random.Random(seed)
        transport = AiohttpTransport(max_connections=max_connections)
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(transport=transport, timeout=timeout),
        )
        # The SDK's telemetry headers (X-Stainless-OS, -Arch, -Runtime…) are left out: no
        # endpoint needs them, and merging them into every request cost ~0.17 ms of CPU per call.
        omitted: dict[str, str | openai.Omit] = {
            name: openai.Omit() for name in self._client.platform_headers()
        }
        self._options: RequestOptions = {"headers": omitted}

    async def aclose(self) -> None:
        await self._client.close()

    async def _call_once(self, request: ChatRequest) -> bytes:
        # The body is already in wire shape, so it goes through the SDK's `post` rather than
        # `create`: `create` re-walks every message and tool schema to transform typed params,
        # which cost ~10 ms of CPU per call at agent-sized histories. The SDK still sends the
        # request and raises its errors; the body arrives as bytes because building its
        # pydantic models cost more CPU than the rest of the call, for fields we never read.
        body: dict[str, Any] = {"model": self.model, "messages": request.messages, **request.extra_params}
        if request.max_tokens is not None:
            key = "max_completion_tokens" if "reasoning_effort" in request.extra_params else "max_tokens"
            body[key] = request.max_tokens
        body.update(request.extra_body)
        if request.tools and "tools" not in request.extra_body:  # the same schemas every call:
            body.pop("tools", None)  # encoded once, and spliced in (they win over extra_params)
            wire = _encode(body)[:-1] + ',"tools":' + _encoded_tools(request.tools) + "}"
        else:
            wire = _encode(body)
        return await self._client.post(
            "/chat/completions", content=wire.encode(), cast_to=bytes, options=self._options
        )

    async def _attempt(self, request: ChatRequest) -> ModelReply:
        if self.limiter is None:
            return parse_reply(await self._call_once(request))
        async with self.limiter.slot() as ticket:
            try:
                reply = parse_reply(await self._call_once(request))
            except (openai.APIError, httpx2.HTTPError) as exc:
                ticket.failed(classify(exc)[0], retry_after(exc))
                raise
            ticket.succeeded(reply.usage.total_tokens)
            return reply

    async def complete(self, request: ChatRequest) -> ModelReply:
        attempt = 0
        while True:
            try:
                return await self._attempt(request)
            except (openai.APIError, httpx2.HTTPError) as exc:
                error_class, retryable = classify(exc)
                if not retryable or attempt >= self.max_retries:
                    status = getattr(exc, "status_code", None)
                    raise ModelAPIError(
                        error_class, f"{type(exc).__name__}: {exc}", status=status, attempts=attempt + 1
                    ) from exc
                delay = backoff_delay(attempt, retry_after(exc), self._rng)
                log.debug("%s (attempt %d), retrying in %.2fs", error_class, attempt + 1, delay)
                attempt += 1
                await asyncio.sleep(delay)
