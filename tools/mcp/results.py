"""A server's tool result as the tool message the model reads: text as is; an image saved
under the run's artifacts directory and shown as a Markdown link with its size, as
`image_generate` shows the images it makes (never base64 in a trajectory); a resource's text,
or what a binary one or a link is; `structuredContent` as JSON when there is no text; an
`isError` result as `{"error": ...}`. Capped as the terminal's output is (MAX_OUTPUT_CHARS, the
start and the end kept): a server's answer is its own to size, the trajectory's is ours."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from pathlib import Path

import mcp_types

from agent.common.images import sniff
from agent.protocols import JSON, ToolConfig
from tools.image_gen import save_image
from tools.terminal.output import truncate_output


async def tool_message(result: mcp_types.CallToolResult, config: ToolConfig, prompt_key: str) -> JSON:
    parts = []
    for block in result.content:
        if isinstance(block, mcp_types.ImageContent):  # saved (and synced) in a thread
            parts.append(await asyncio.to_thread(_image, block.data, block.mime_type, config, prompt_key))
        else:
            parts.append(_part(block))
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    text = truncate_output("\n\n".join(parts))
    if result.is_error:
        return {"error": text or "the tool reported an error without saying what"}
    return text if parts else "(the tool returned nothing)"


def _part(block: mcp_types.ContentBlock) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent):
        return f"[image: {block.mime_type}]"
    if isinstance(block, mcp_types.AudioContent):
        return f"[audio: {block.mime_type}, {_size(block.data)} bytes, not shown]"
    if isinstance(block, mcp_types.ResourceLink):
        about = f": {block.description}" if block.description else ""
        return f"[resource link: {block.name} <{block.uri}>{about}]"
    resource = block.resource
    if isinstance(resource, mcp_types.TextResourceContents):
        return f"[resource <{resource.uri}>]\n{resource.text}"
    kind = resource.mime_type or "binary"
    return f"[resource <{resource.uri}>: {kind}, {_size(resource.blob)} bytes, not shown]"


def _size(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=")


def _image(data: str, mime: str, config: ToolConfig, prompt_key: str) -> str:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"[image: {mime}, not valid base64]"
    info = sniff(raw)
    if info is None:
        return f"[image: {mime}, {len(raw)} bytes that are not a PNG, JPEG, GIF or WebP]"
    if config.artifacts_dir is None:
        return f"[image: {info.format}, {info.width}x{info.height}, {len(raw)} bytes, not saved]"
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", prompt_key).strip(".-") or "image"
    relative = save_image(Path(config.artifacts_dir), f"{stem}-mcp", raw, info.format)
    return f"![image]({relative}) ({info.format}, {info.width}x{info.height}, {len(raw)} bytes)"
