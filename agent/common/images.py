"""What an image file is, from its first bytes: format, MIME type and pixel size.

The image tools check that what they fetched or were given really is an image (a server's
Content-Type can lie) and report its dimensions; the simulated endpoint describes the images
it receives. Only the headers are read (PNG IHDR, GIF screen descriptor, JPEG SOF marker,
WebP VP8/VP8L/VP8X), never the pixels.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


@dataclass(frozen=True)
class ImageInfo:
    format: str  # "png", "jpeg", "gif", "webp"
    width: int
    height: int

    @property
    def mime(self) -> str:
        return f"image/{self.format}"


def sniff(data: bytes) -> ImageInfo | None:
    """The image `data` holds, or None when it is not a PNG, JPEG, GIF or WebP we can read."""
    try:
        if data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
            return _info("png", width, height)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            width, height = struct.unpack("<HH", data[6:10])
            return _info("gif", width, height)
        if data.startswith(b"\xff\xd8"):
            return _jpeg(data)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp(data)
    except struct.error:  # a header cut short
        return None
    return None


def _info(kind: str, width: int, height: int) -> ImageInfo | None:
    return ImageInfo(kind, width, height) if width > 0 and height > 0 else None


def _jpeg(data: bytes) -> ImageInfo | None:
    """Walk the JPEG segments to the first start-of-frame marker, which holds the size."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return _info("jpeg", width, height)
        at += 2 + length
    return None


def _webp(data: bytes) -> ImageInfo | None:
    chunk = data[12:16]
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return _info("webp", width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return _info("webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return _info("webp", width, height)
    return None


def to_data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def from_data_url(url: str) -> tuple[str, bytes]:
    """(media type, bytes) of a `data:` URL; ValueError says what is wrong with it."""
    if not url.startswith("data:") or "," not in url:
        raise ValueError("not a data: URL (data:<type>;base64,<data>)")
    header, payload = url[5:].split(",", 1)
    media_type = header.split(";")[0] or "text/plain"
    if not header.endswith(";base64"):
        raise ValueError("the data: URL is not base64-encoded (…;base64,…)")
    try:
        return media_type, base64.b64decode(payload, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"the data: URL's base64 is invalid: {exc}") from None
