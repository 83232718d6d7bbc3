"""The image generation family: `image_generate` makes one image with the run's endpoint and
saves it under the run directory; the tool result names the file, never holds its bytes.

How it asks is `--image_api`: the images endpoint (`POST /images/generations`, OpenAI's shape)
or an image-output chat model (`modalities: ["image", "text"]`, OpenRouter's), `auto` choosing
by endpoint (`agent.llm.client`). The call goes through the run's client (its key, limiter and
retries) and its usage counts in the prompt's. The image is checked (PNG, JPEG, GIF or WebP)
and written atomically to `<artifacts_dir>/images/<prompt key>-<n>.<format>`, never
overwriting an earlier one; the result gives that path relative to the run directory, with
the image's size and dimensions. In batch runs `artifacts_dir` is the run directory; the
single-query command line sets the current directory.
"""

from __future__ import annotations

import asyncio
import glob
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.common.fetch import FetchError, FetchRules, fetch_once
from agent.common.images import sniff
from agent.common.network_policy import NetworkPolicy
from agent.errors import ModelAPIError
from agent.protocols import JSON, ImageModel, ImageRequest, ToolConfig, ToolContext, Toolset, ToolSpec

MAX_IMAGE_BYTES = 32 * 2**20
# A generated image the API links to: any media type (its bytes are sniffed), slow hosts waited on.
GENERATED_RULES = FetchRules(max_bytes=MAX_IMAGE_BYTES, timeout=120.0)
IMAGES_DIR = "images"
# aspect_ratio -> (images API size, chat image_config aspect ratio)
SHAPES = {"landscape": ("1536x1024", "3:2"), "square": ("1024x1024", "1:1"), "portrait": ("1024x1536", "2:3")}

SCHEMA: dict[str, Any] = {
    "name": "image_generate",
    "description": (
        "Generate one image from a text description. Returns the saved image's path (relative to "
        "the run directory), size and dimensions, and markdown to show it."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "What the image should show, in detail."},
            "aspect_ratio": {
                "type": "string",
                "enum": list(SHAPES),
                "description": "Image shape (default landscape).",
            },
        },
        "required": ["prompt"],
    },
}


def unavailable(config: ToolConfig) -> str | None:
    if config.image_output_unsupported:
        return config.image_output_unsupported
    if config.artifacts_dir is None:
        return (
            "image_generate needs a directory to save images in (ToolConfig.artifacts_dir): "
            "batch_runner.py uses the run directory, run_agent.py the current directory"
        )
    return None


async def image_generate(args: Mapping[str, Any], context: ToolContext) -> JSON:
    model, config = context.model, context.config
    if not isinstance(model, ImageModel) or config.artifacts_dir is None:
        return {"error": "image generation is not available in this run (no image-capable client)"}
    prompt = str(args["prompt"]).strip()
    if not prompt:
        return {"error": "prompt is empty: describe the image to generate"}
    size, ratio = SHAPES[str(args.get("aspect_ratio") or "landscape")]
    request = ImageRequest(prompt, config.image_api, size, ratio, model=config.image_model)
    try:
        reply = await model.generate_image(request)
    except ModelAPIError as exc:
        return {"error": f"the image model failed ({exc.error_class}): {exc}"}
    context.add_usage(reply.usage)
    image = reply.images[0]
    try:
        data = image if isinstance(image, bytes) else await _download(image, config)
    except FetchError as exc:
        return {"error": f"the generated image could not be downloaded: {exc}"}
    info = sniff(data)
    if info is None:
        return {"error": f"the image model returned {len(data)} bytes that are not a PNG, JPEG, GIF or WebP"}
    name = _file_stem(context.prompt_key)
    relative = await asyncio.to_thread(save_image, Path(config.artifacts_dir), name, data, info.format)
    return {
        "path": relative,
        "bytes": len(data),
        "width": info.width,
        "height": info.height,
        "format": info.format,
        "markdown": f"![{_alt(prompt)}]({relative})",
    }


async def _download(url: str, config: ToolConfig) -> bytes:
    """An image the API answered with by link, fetched under the run's network policy."""
    policy = NetworkPolicy.from_allow_list(config.allow_hosts)
    return (await fetch_once(url, policy, GENERATED_RULES)).body


def _file_stem(prompt_key: str) -> str:
    """A file name from the prompt key (`<hash>:<copy>` → `<hash>-<copy>`)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", prompt_key).strip(".-") or "image"


def _alt(prompt: str) -> str:
    flat = re.sub(r"[\s\[\]]+", " ", prompt).strip()
    return flat if len(flat) <= 80 else flat[:79] + "…"


def save_image(root: Path, stem: str, data: bytes, extension: str) -> str:
    """Write `data` as `root/images/<stem>-<n>.<extension>` with the first free n (written to a
    temporary file, synced, then linked into place, so a reader never sees half an image and
    concurrent calls never overwrite each other); returns the path relative to `root`."""
    folder = root / IMAGES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".partial-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        for number in range(1, 100_000):
            name = f"{stem}-{number}.{'jpg' if extension == 'jpeg' else extension}"
            if any(folder.glob(f"{glob.escape(stem)}-{number}.*")):  # n counts images, any format
                continue
            try:
                os.link(temporary, folder / name)
            except FileExistsError:
                continue
            return f"{IMAGES_DIR}/{name}"
        raise OSError(f"no free image file name for {stem} in {folder}")
    finally:
        os.unlink(temporary)


TOOLSET = Toolset(
    "image_gen",
    "Image generation",
    (ToolSpec("image_generate", SCHEMA, image_generate, available=unavailable),),
)
