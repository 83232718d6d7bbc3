"""The chat-model seam: a request, a reply, usage and prices, and the server side's responder."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from agent.protocols.tokens import TokenCapture


@dataclass(frozen=True)
class Prices:
    """A price table in USD per million tokens; `cached` prices the cached prompt tokens (at
    the input price when None)."""

    input: float
    output: float
    cached: float | None = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the provider served from its cache
    cost_usd: float | None = None  # what the calls cost, when known (provider-reported or priced)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.cached_tokens + other.cached_tokens,
            sum(costs) if costs else None,
        )

    def priced(self, prices: Prices | None) -> Usage:
        """With `cost_usd` from the price table, unless the provider already said what it cost."""
        if self.cost_usd is not None or prices is None:
            return self
        cached = min(self.cached_tokens, self.prompt_tokens)
        cached_price = prices.input if prices.cached is None else prices.cached
        micro = (
            (self.prompt_tokens - cached) * prices.input
            + cached * cached_price
            + self.completion_tokens * prices.output
        )
        return replace(self, cost_usd=micro / 1_000_000)

    def as_dict(self) -> dict[str, float]:
        """The usage of `metadata.usage`; cached tokens and cost only when there are any, so
        runs without them keep their bytes."""
        data: dict[str, float] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cached_tokens:
            data["cached_tokens"] = self.cached_tokens
        if self.cost_usd is not None:
            data["cost_usd"] = round(self.cost_usd, 10)
        return data


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completions call, already in API shape (system, prefill and history included)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    extra_params: dict[str, Any] = field(default_factory=dict)  # top-level params, e.g. reasoning_effort
    model: str | None = None  # None: the client's model (tools such as vision or moa ask for others)
    # The token API to ask for ids and logprobs in (agent.llm.tokens; None: text only). Only the
    # agent loop's own calls set it: a tool's model calls are not training data.
    token_api: str | None = None


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw JSON string the model emitted


@dataclass(frozen=True)
class ModelReply:
    """The assistant turn as we keep it: reasoning separated from content, tool calls raw."""

    content: str
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: Usage
    reasoning_details: list[Any] | None = None
    reasoning_forced: bool = False  # the endpoint's output grammar made the model write it
    tokens: TokenCapture | None = None  # the call's token ids and logprobs (--capture_tokens)


class ChatModel(Protocol):
    """An LLM endpoint. Raises `agent.errors.ModelAPIError` when the call fails for good."""

    async def complete(self, request: ChatRequest) -> ModelReply: ...


# How images are asked for: the images endpoint, a chat model with image output, or "auto"
# (the client's choice from its endpoint: chat on OpenRouter, which has no images endpoint).
IMAGE_APIS = ("auto", "images", "chat")


@dataclass(frozen=True)
class ImageRequest:
    """One image to generate. `api` "images" is `POST /images/generations` (the OpenAI
    shape, `size`); "chat" is a chat completion with `modalities: ["image", "text"]`
    (OpenRouter's image-output models, `aspect_ratio`); "auto" leaves it to the client."""

    prompt: str
    api: str
    size: str  # "1536x1024"
    aspect_ratio: str  # "3:2"
    model: str | None = None  # None: the API's default image model (agent.llm.images)


@dataclass(frozen=True)
class ImageReply:
    """The images a call returned, each as bytes or (when the API answered with a link) an
    http(s) URL still to be fetched, and what the call used."""

    images: tuple[bytes | str, ...]
    usage: Usage
    text: str = ""  # what a chat image model said besides the image


@runtime_checkable
class ImageModel(Protocol):
    """A model client that can also generate images (the run's client, when it speaks HTTP).
    Raises `agent.errors.ModelAPIError` when the call fails for good."""

    async def generate_image(self, request: ImageRequest) -> ImageReply: ...


# An async function that answers one chat-completions request body (server side of the seam).
Responder = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
