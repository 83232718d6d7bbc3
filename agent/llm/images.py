"""Image generation requests and replies in the two API shapes the runner speaks.

`images`: `POST {base_url}/images/generations` (OpenAI's shape; servers that copy it, such as
LiteLLM or LocalAI, take the same body). The reply lists `data[].b64_json` or `data[].url`.
`chat`: a chat completion with `modalities: ["image", "text"]` (OpenRouter's image-output
models, which have no images endpoint); the images come back in `message.images[]` as
`image_url.url`, a base64 `data:` URL. What travels is decoded here; the transport, limiter
and retries are the client's (`agent.llm.client`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from agent.common.images import from_data_url
from agent.errors import FailureClass, ModelAPIError
from agent.llm.reply import parse_reply, read_usage
from agent.protocols import ImageReply, ImageRequest, Usage

IMAGES_PATH = "/images/generations"
CHAT_PATH = "/chat/completions"
MAX_IMAGES = 16  # one is asked for; a reply with more is broken, not a gift
# The model when --image_model is not given: OpenAI's image model on the images endpoint, and
# on OpenRouter (chat) Google's image-output model, which both providers list as current.
DEFAULT_MODELS = {"images": "gpt-image-1", "chat": "google/gemini-2.5-flash-image"}


def request_body(request: ImageRequest, api: str) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of `request` for `api` ("images" or "chat")."""
    model = request.model or DEFAULT_MODELS[api]
    if api == "images":
        # No response_format: gpt-image models refuse it (they always send b64_json) and
        # dall-e's default is a URL; both answers are read.
        return IMAGES_PATH, {"model": model, "prompt": request.prompt, "n": 1, "size": request.size}
    return CHAT_PATH, {
        "model": model,
        "messages": [{"role": "user", "content": request.prompt}],
        "modalities": ["image", "text"],
        "image_config": {"aspect_ratio": request.aspect_ratio},
    }


def parse_image_reply(raw: bytes, api: str) -> ImageReply:
    """The images (bytes, or URLs still to fetch) of a reply body; a body without any image is
    an invalid response (a model that answered in words only, a broken endpoint)."""
    try:
        reply = _images_reply(raw) if api == "images" else _chat_reply(raw)
    except (ValueError, LookupError, TypeError) as exc:
        shown = raw[:200].decode("utf-8", "replace")
        raise ModelAPIError(FailureClass.INVALID_RESPONSE, f"not an image reply ({exc}): {shown}") from exc
    if not reply.images:
        said = f": the model said {reply.text[:200]!r}" if reply.text else ""
        raise ModelAPIError(FailureClass.INVALID_RESPONSE, f"the reply holds no image{said}")
    return reply


def _images_reply(raw: bytes) -> ImageReply:
    body = json.loads(raw)
    items = body["data"]
    if not isinstance(items, list) or len(items) > MAX_IMAGES:
        raise TypeError(f"data is not a list of at most {MAX_IMAGES} images")
    images: list[bytes | str] = []
    for item in items:
        if isinstance(item.get("b64_json"), str):
            images.append(_b64(item["b64_json"]))
        elif isinstance(item.get("url"), str):
            images.append(_url(item["url"]))
    usage = body.get("usage")
    return ImageReply(tuple(images), _images_usage(usage if isinstance(usage, dict) else {}))


def _images_usage(usage: dict[str, Any]) -> Usage:
    """The images API counts input/output tokens (gpt-image-1); chat-style names also read."""
    renamed = {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens")}
    return read_usage({**usage, **{k: v for k, v in renamed.items() if v is not None}})


def _chat_reply(raw: bytes) -> ImageReply:
    reply = parse_reply(raw)  # raises ModelAPIError itself on a body that is no completion
    message = json.loads(raw)["choices"][0]["message"]
    listed = message.get("images") or []
    if not isinstance(listed, list) or len(listed) > MAX_IMAGES:
        raise TypeError(f"message.images is not a list of at most {MAX_IMAGES} images")
    images = [_url(item["image_url"]["url"]) for item in listed]
    return ImageReply(tuple(images), reply.usage, reply.content)


def _url(url: str) -> bytes | str:
    """A data: URL's bytes; an http(s) URL as is (fetched later, under the network policy)."""
    if url.startswith("data:"):
        return from_data_url(url)[1]
    if url.startswith(("http://", "https://")):
        return url
    raise ValueError(f"an image URL that is neither data: nor http(s): {url[:80]!r}")


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"b64_json is not base64: {exc}") from None
