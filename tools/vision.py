"""The vision tool family: `vision_analyze` answers a question about an image with a
multimodal chat model (`--vision_model`, default the run's model, through the run's client).

The image comes from an http(s) URL (fetched here under the network policy, so a provider
never has to reach it and the model cannot make the runner fetch a private address), a `data:`
URL, or a path in the prompt's sandbox; it is always sent as a base64 `data:` URL after its
bytes were checked to be a PNG, JPEG, GIF or WebP of at most MAX_IMAGE_BYTES. The result is
the model's analysis as text; every failure (bad URL, refused by the policy, too big, not an
image, the model failing) is an {"error": ...} result the model reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.common.fetch import FetchError, FetchRules, fetch_once
from agent.common.images import from_data_url, sniff, to_data_url
from agent.common.network_policy import NetworkPolicy
from agent.errors import ModelAPIError, SandboxPathError
from agent.protocols import JSON, ChatRequest, ToolContext, Toolset, ToolSpec, sees_images

MAX_IMAGE_BYTES = 20 * 2**20  # the largest image OpenAI's vision input accepts
# What a server calls an image, or says nothing about, is read; its bytes are checked anyway.
IMAGE_RULES = FetchRules(
    max_bytes=MAX_IMAGE_BYTES, content_types=("image/", "application/octet-stream"), wanted="an image"
)

SCHEMA: dict[str, Any] = {
    "name": "vision_analyze",
    "description": (
        "Answer a question about an image: describe it, read text in it, find details. The image "
        "is an http(s) URL, a data: URL, or the path of an image file in your sandbox."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "image_url": {
                "type": "string",
                "description": "http(s) URL, data: URL, or a sandbox file path (PNG, JPEG, GIF, WebP).",
            },
            "question": {"type": "string", "description": "What to find out about the image."},
        },
        "required": ["image_url", "question"],
    },
}


class ImageSourceError(Exception):
    """The image cannot be had; the message says why (for the model)."""


async def vision_analyze(args: Mapping[str, Any], context: ToolContext) -> JSON:
    try:
        data_url = await load_image(str(args["image_url"]).strip(), context)
    except ImageSourceError as exc:
        return {"error": str(exc)}
    question = str(args["question"])
    return await ask_about_image(context, data_url, question)


async def ask_about_image(context: ToolContext, data_url: str, question: str) -> JSON:
    """The vision model's answer to `question` about the image (a data: URL), its usage counted."""
    content = [{"type": "text", "text": question}, {"type": "image_url", "image_url": {"url": data_url}}]
    request = ChatRequest(
        messages=[{"role": "user", "content": content}], tools=[], model=context.config.vision_model
    )
    try:
        reply = await context.model.complete(request)
    except ModelAPIError as exc:
        return {"error": f"the vision model failed ({exc.error_class}): {exc}"}
    context.add_usage(reply.usage)
    if not reply.content.strip():
        return {"error": "the vision model returned no analysis"}
    return reply.content


async def load_image(source: str, context: ToolContext) -> str:
    """The image at `source` as a checked base64 data: URL."""
    if source.startswith("data:"):
        try:
            data = from_data_url(source)[1]
        except ValueError as exc:
            raise ImageSourceError(str(exc)) from None
    elif source.startswith(("http://", "https://")):
        data = await _download(source, context)
    elif "://" in source:
        raise ImageSourceError(f"{source[:100]}: only http(s) URLs, data: URLs and sandbox paths are read")
    else:
        data = await _read_sandbox_file(source, context)
    return to_data_url(data, _checked_type(data, source))


async def _download(url: str, context: ToolContext) -> bytes:
    policy = NetworkPolicy.from_allow_list(context.config.allow_hosts)
    try:
        return (await fetch_once(url, policy, IMAGE_RULES)).body
    except FetchError as exc:
        raise ImageSourceError(str(exc)) from None


async def _read_sandbox_file(path: str, context: ToolContext) -> bytes:
    if not path:
        raise ImageSourceError("image_url is empty")
    sandbox = await context.sandbox()
    try:
        data = await sandbox.read_file(path)
    except SandboxPathError as exc:
        raise ImageSourceError(str(exc)) from None
    except FileNotFoundError:
        raise ImageSourceError(f"File not found: {path}") from None
    except OSError as exc:
        raise ImageSourceError(f"Cannot read {path}: {exc.strerror or exc}") from None
    return data


def _checked_type(data: bytes, source: str) -> str:
    shown = source if len(source) <= 100 else source[:100] + "…"
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageSourceError(f"{shown}: {len(data)} bytes, more than the {MAX_IMAGE_BYTES}-byte limit")
    info = sniff(data)
    if info is None:
        raise ImageSourceError(f"{shown}: not a PNG, JPEG, GIF or WebP image")
    return info.mime


TOOLSET = Toolset(
    "vision", "Image analysis", (ToolSpec("vision_analyze", SCHEMA, vision_analyze, available=sees_images),)
)
