"""The simulated endpoint's images: what it says about images it is shown, the images it makes.

Shown images (`image_url` parts in chat messages) are described from their bytes, so a test
can tell the image really arrived: format, pixel size, dominant colour (PNG) and a hash of the
bytes. Made images (`/v1/images/generations`, and chat replies when `modalities` asks for
images) are real PNGs of the requested size whose colour is derived from the prompt.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from agent.common.images import from_data_url, sniff, to_data_url
from agent.servers.faults import EndpointFault
from agent.servers.simulated.png import RGB, dominant_colour, encode_png
from agent.servers.traffic import current_request

MAX_SIDE = 4096
DEFAULT_SIZE = (1024, 1024)
LONG_SIDE = 1024  # of images made for an aspect ratio
_NAMED: dict[str, RGB] = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "grey": (128, 128, 128),
    "red": (220, 30, 30),
    "orange": (245, 140, 20),
    "yellow": (240, 220, 30),
    "green": (30, 170, 60),
    "cyan": (30, 200, 220),
    "blue": (30, 60, 220),
    "purple": (130, 40, 180),
    "pink": (240, 130, 180),
    "brown": (120, 70, 30),
}


def colour_name(colour: RGB) -> str:
    """The nearest of a dozen colour names."""
    return min(_NAMED, key=lambda name: sum((a - b) ** 2 for a, b in zip(_NAMED[name], colour, strict=True)))


def prompt_colour(prompt: str) -> RGB:
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    return (digest[0], digest[1], digest[2])


def describe(data: bytes) -> str:
    """What the simulated model "sees": computed from the bytes alone, so deterministic."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    info = sniff(data)
    if info is None:
        return f"{len(data)} bytes that are not an image I can read (sha256 {digest})"
    text = f"a {info.format.upper()} image, {info.width}x{info.height} pixels"
    colour = dominant_colour(data) if info.format == "png" else None
    if colour is not None:
        text += f", mostly {colour_name(colour)} (#{bytes(colour).hex()})"
    return f"{text}, {len(data)} bytes, sha256 {digest}"


def image_parts(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The image URLs in the last user message's content parts."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    content = last.get("content") if last else None
    if not isinstance(content, list):
        return []
    urls = [(part.get("image_url") or {}) for part in content if isinstance(part, dict)]
    return [u["url"] if isinstance(u, dict) else str(u) for u in urls if u]


def describe_images(urls: Sequence[str]) -> str:
    """The answer to a message that shows these images."""
    lines = []
    for i, url in enumerate(urls, 1):
        if url.startswith("data:"):
            try:
                seen = describe(from_data_url(url)[1])
            except ValueError as exc:
                seen = f"an unreadable data URL ({exc})"
        else:
            seen = f"a link I did not open ({url[:100]})"
        lines.append(f"Image {i}: {seen}.")
    return "\n".join(lines)


def parse_size(size: Any) -> tuple[int, int]:
    """(width, height) of an images-API `size` ("1536x1024"; "auto" or none: 1024x1024)."""
    if size in (None, "auto"):
        return DEFAULT_SIZE
    match = re.fullmatch(r"(\d{1,5})x(\d{1,5})", str(size))
    if not match or not all(0 < int(side) <= MAX_SIDE for side in match.groups()):
        raise EndpointFault(400, f"size must be WIDTHxHEIGHT with sides up to {MAX_SIDE}, or auto")
    return int(match[1]), int(match[2])


def aspect_size(ratio: Any) -> tuple[int, int]:
    """(width, height) for an image_config aspect ratio ("16:9"), the long side LONG_SIDE."""
    match = re.fullmatch(r"(\d{1,3}):(\d{1,3})", str(ratio or "1:1"))
    wide, high = (int(match[1]), int(match[2])) if match else (1, 1)
    if not wide or not high:
        wide = high = 1
    if wide >= high:
        return LONG_SIDE, max(1, LONG_SIDE * high // wide)
    return max(1, LONG_SIDE * wide // high), LONG_SIDE


class ImageStore:
    """Images answered by URL (`response_format: "url"`), the most recent ones kept."""

    def __init__(self, keep: int = 64) -> None:
        self._keep = keep
        self._images: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, data: bytes) -> str:
        name = hashlib.sha256(data).hexdigest()[:24] + ".png"
        with self._lock:
            self._images[name] = data
            while len(self._images) > self._keep:
                self._images.popitem(last=False)
        return name

    def get(self, name: str) -> bytes | None:
        with self._lock:
            return self._images.get(name)


def generations(body: Mapping[str, Any], store: ImageStore) -> dict[str, Any]:
    """The `/v1/images/generations` answer: `n` PNGs as b64_json, or as links (asked for, or
    a dall-e model's default) served from `store`."""
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise EndpointFault(400, "prompt is required")
    width, height = parse_size(body.get("size"))
    count = body.get("n", 1)
    if not isinstance(count, int) or not 1 <= count <= 4:
        raise EndpointFault(400, "n must be an integer from 1 to 4")
    data = encode_png(width, height, prompt_colour(prompt))
    # As OpenAI: a link when asked, or by default for dall-e models; gpt-image models send base64.
    model, asked = str(body.get("model") or ""), body.get("response_format")
    by_url = asked == "url" or (asked is None and model.startswith("dall-e"))
    item = {"url": _url_of(store.put(data))} if by_url else None
    encoded = item or {"b64_json": base64.b64encode(data).decode("ascii")}
    tokens = max(1, len(prompt) // 4)
    usage = {"input_tokens": tokens, "output_tokens": 272, "total_tokens": tokens + 272}
    return {"created": int(time.time()), "data": [dict(encoded) for _ in range(count)], "usage": usage}


def _url_of(name: str) -> str:
    request = current_request()
    host = request.headers.get("host", "127.0.0.1") if request else "127.0.0.1"
    return f"http://{host}/v1/files/{name}"


def wants_image_output(body: Mapping[str, Any]) -> bool:
    modalities = body.get("modalities")
    return isinstance(modalities, list) and "image" in modalities


def add_image_output(completion: dict[str, Any], body: Mapping[str, Any], prompt: str) -> None:
    """Make `completion` an image-output chat reply (OpenRouter's shape: message.images)."""
    config = body.get("image_config")
    ratio = config.get("aspect_ratio") if isinstance(config, dict) else None
    width, height = aspect_size(ratio)
    url = to_data_url(encode_png(width, height, prompt_colour(prompt)), "image/png")
    message = completion["choices"][0]["message"]
    message["content"] = f"Here is an image of: {prompt[:200]}"
    message["images"] = [{"type": "image_url", "image_url": {"url": url}}]
