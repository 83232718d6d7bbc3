"""The chat model over HTTP: the `openai` SDK, our retry policy, reasoning capture.

Retries happen here and only here (the SDK's own retries are off): transient failures
(429, 5xx, timeouts, dropped connections, and an error with such a code reported inside a
200 reply: `agent.llm.reply.ErrorInReply`) are retried with jittered exponential backoff that
honours `Retry-After`; everything else fails at once as a `ModelAPIError`. Each attempt is
bounded by the transport (a deadline for the whole exchange, a cap on the reply body) and
its body read by `agent.llm.reply`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

import httpx2
import openai
from openai._types import RequestOptions

from agent.common.identity_memo import IdentityMemo
from agent.common.redaction import active as active_redactor
from agent.config.agent_config import DEFAULT_MAX_REPLY_BYTES
from agent.errors import FailureClass, ModelAPIError
from agent.llm.http_client import LeanAsyncClient
from agent.llm.images import DEFAULT_MODELS, parse_image_reply, request_body
from agent.llm.rate_limit import AdaptiveLimiter
from agent.llm.reply import ErrorInReply, parse_reply
from agent.llm.tokens import find_api
from agent.llm.transport import AiohttpTransport, ReplyTooLarge
from agent.protocols import ChatRequest, ImageReply, ImageRequest, ModelReply, Usage

log = logging.getLogger(__name__)


class _Used(Protocol):
    @property
    def usage(self) -> Usage: ...


R = TypeVar("R", bound=_Used)  # a parsed reply: what the limiter counts is its usage

BACKOFF_BASE = 1.0
BACKOFF_CAP = 60.0
RETRY_AFTER_CAP = 120.0
HONOURED = 3  # attempts that wait just the server's Retry-After before the backoff grows
# The statuses that are no transient failure and not a bad request: the SDK's own classes for
# them (AuthenticationError…) are chosen by the same status, so one table serves both.
_STATUS_CLASSES = {401: FailureClass.AUTH, 403: FailureClass.AUTH, 404: FailureClass.NOT_FOUND}


def classify(exc: Exception) -> tuple[FailureClass, bool]:
    """(error_class, retryable) for an exception raised by the SDK, or an error the endpoint
    reported inside a reply (`ErrorInReply`)."""
    # The transport's own errors count as the SDK's wrappers of them do, wherever they surface
    # (a reply cut at its deadline while its body is read is a timeout, never a bad reply).
    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return FailureClass.TIMEOUT, True
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        return FailureClass.CONNECTION, True
    if isinstance(exc, openai.APIStatusError):
        return _by_status(exc.status_code)
    if isinstance(exc, ErrorInReply):  # no code: the provider failed mid-answer, its side
        return _by_status(500 if exc.status_code is None else exc.status_code)
    return FailureClass.INVALID_RESPONSE, False


def _by_status(status: int) -> tuple[FailureClass, bool]:
    """(error_class, retryable) for an HTTP status: 429, 5xx, 408 and 409 are retried."""
    if status == 429:
        return FailureClass.RATE_LIMIT, True
    if status >= 500 or status in (408, 409):
        return FailureClass.SERVER_ERROR, True
    return _STATUS_CLASSES.get(status, FailureClass.BAD_REQUEST), False


def retry_after(exc: Exception) -> float | None:
    """Seconds the server asked us to wait, if it did."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    value = response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    # "nan" parses as a float, and a NaN delay sleeps for no time at all: retries back to back.
    return min(seconds, RETRY_AFTER_CAP) if seconds >= 0 else None


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


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


_encoded_tools = IdentityMemo(_encode)


def _token_fields(name: str) -> Mapping[str, Any]:
    """The request fields of token API `name` (`agent.llm.tokens`)."""
    try:
        return find_api(name).fields
    except ValueError as exc:  # only a probe names an API, so this is a bug, said as one
        raise ModelAPIError(FailureClass.BAD_REQUEST, str(exc)) from None


def _request_options(client: openai.AsyncOpenAI, timeout: float) -> RequestOptions:
    """The options every request of `client` is sent with."""
    # The SDK's telemetry headers (X-Stainless-OS, -Arch, -Runtime…) are left out: no
    # endpoint needs them, and merging them into every request cost ~0.17 ms of CPU per call.
    omitted: dict[str, str | openai.Omit] = {name: openai.Omit() for name in client.platform_headers()}
    # The client's own values, given: the SDK's request options would otherwise deep-copy
    # each default (a dict, a NotGiven) into every request's options (~40 µs per call).
    return {
        "headers": omitted,
        "max_retries": 0,
        "timeout": timeout,
        "params": {},
        "security": {"bearer_auth": True, "admin_api_key_auth": True},
    }


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
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        image_api: str = "images",
    ) -> None:
        """`timeout` bounds each HTTP attempt as a whole (connect, headers, the entire body);
        a reply body over `max_reply_bytes` fails the call as `invalid_response`."""
        self.model = model
        self.image_api = image_api  # how `generate_image` asks when the request says "auto"
        self.max_retries = max_retries
        self.limiter = limiter
        self._rng = random.Random(seed)
        self._told_retrying = False  # the first retry is said at INFO (`_say_retrying`)
        transport = AiohttpTransport(max_connections=max_connections, max_reply_bytes=max_reply_bytes)
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=0,
            # The SDK's default client's settings (it follows redirects), building less per call.
            http_client=LeanAsyncClient(transport=transport, timeout=timeout, follow_redirects=True),
        )
        self._options = _request_options(self._client, timeout)
        self._urls: dict[str, str] = {}

    async def aclose(self) -> None:
        await self._client.close()

    async def _call_once(self, request: ChatRequest) -> bytes:
        # The body is already in wire shape, so it goes through the SDK's `post` rather than
        # `create`: `create` re-walks every message and tool schema to transform typed params,
        # which cost ~10 ms of CPU per call at agent-sized histories. The SDK still sends the
        # request and raises its errors; the body arrives as bytes because building its
        # pydantic models cost more CPU than the rest of the call, for fields we never read.
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": request.messages,
            **request.extra_params,
        }
        if request.max_tokens is not None:
            key = "max_completion_tokens" if "reasoning_effort" in request.extra_params else "max_tokens"
            body[key] = request.max_tokens
        body.update(request.extra_body)
        if request.token_api is not None:  # last: a --sampling_extra "logprobs" must not undo them
            body.update(_token_fields(request.token_api))
        if request.tools and "tools" not in request.extra_body:  # the same schemas every call:
            body.pop("tools", None)  # encoded once, and spliced in (they win over extra_params)
            wire = _encode(body)[:-1] + ',"tools":' + _encoded_tools(request.tools) + "}"
        else:
            wire = _encode(body)
        return await self._post("/chat/completions", wire.encode())

    async def _post(self, path: str, wire: bytes) -> bytes:
        # Cast to the HTTP response itself, which the SDK hands back as it is (its status
        # already checked): a cast to bytes wraps it in an API response first, to read the same body.
        response = await self._client.post(
            self._url(path), content=wire, cast_to=httpx2.Response, options=self._options
        )
        # An endpoint that echoes a secret must not hand it to a tool: its arguments would take
        # it into the sandbox, or to the hosts a tool fetches. What the model "said" is redacted
        # before anything reads it, so the conversation records what the tools were given.
        return active_redactor().redact_bytes(response.content)

    def _url(self, path: str) -> str:
        """`path` under the client's base URL, as the SDK joins them: given whole, the SDK parses
        it once instead of parsing the path and then joining it to the base (~0.1 ms per call)."""
        found = self._urls.get(path)
        if found is None:
            base = self._client.base_url
            found = self._urls[path] = str(base.copy_with(raw_path=base.raw_path + path.lstrip("/").encode()))
        return found

    async def complete(self, request: ChatRequest) -> ModelReply:
        api = request.token_api
        return await self._retrying(lambda: self._call_once(request), lambda raw: parse_reply(raw, api))

    async def generate_image(self, request: ImageRequest) -> ImageReply:
        """One image through the images endpoint or an image-output chat model (`request.api`,
        "auto": this client's `image_api`), with the same limiter and retries as chat."""
        api = self.image_api if request.api == "auto" else request.api
        if api not in DEFAULT_MODELS:
            raise ModelAPIError(FailureClass.BAD_REQUEST, f"unknown image API {api!r}: images or chat")
        path, body = request_body(request, api)

        async def send() -> bytes:
            return await self._post(path, _encode(body).encode())

        return await self._retrying(send, lambda raw: parse_image_reply(raw, api))

    async def _attempt(self, send: Callable[[], Awaitable[bytes]], parse: Callable[[bytes], R]) -> R:
        if self.limiter is None:
            return parse(await send())
        async with self.limiter.slot() as ticket:
            try:
                reply = parse(await send())
            except (openai.APIError, httpx2.HTTPError, ErrorInReply) as exc:
                ticket.failed(classify(exc)[0], retry_after(exc))
                raise
            ticket.answered(reply.usage)
            return reply

    def _say_retrying(self, attempt: int, error_class: str, exc: Exception) -> None:
        """The first retry of this client at INFO (run_agent.py shows it: a lone query would wait
        silently for minutes; a run's workers do not), every one at DEBUG."""
        log.debug("%s (attempt %d), retrying", error_class, attempt + 1)
        if self._told_retrying:
            return
        self._told_retrying = True
        log.info(
            "model endpoint %s: attempt %d failed (%s: %s); retrying, at most %d more attempt(s),"
            " waiting longer each time (--max_retries)",
            str(self._client.base_url).rstrip("/"), attempt + 1, error_class, str(exc)[:300],
            self.max_retries - attempt,
        )  # fmt: skip

    async def _retrying(self, send: Callable[[], Awaitable[bytes]], parse: Callable[[bytes], R]) -> R:
        attempt = 0
        while True:
            try:
                return await self._attempt(send, parse)
            except ReplyTooLarge as exc:  # the same request would get the same: not retried
                raise ModelAPIError(FailureClass.INVALID_RESPONSE, str(exc), attempts=attempt + 1) from exc
            except (openai.APIError, httpx2.HTTPError, ErrorInReply) as exc:
                error_class, retryable = classify(exc)
                if not retryable or attempt >= self.max_retries:
                    status = getattr(exc, "status_code", None)
                    raise ModelAPIError(
                        error_class, f"{type(exc).__name__}: {exc}", status=status, attempts=attempt + 1
                    ) from exc
                delay = backoff_delay(attempt, retry_after(exc), self._rng)
                self._say_retrying(attempt, error_class, exc)
                attempt += 1
                await asyncio.sleep(delay)
