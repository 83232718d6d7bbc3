"""PNG in pure Python (zlib only): the simulated endpoint's generated images and the dominant
colour of the ones it is shown.

Encoding writes a real, valid PNG of one colour with a diagonal band (so it is no trivial
single-colour file); decoding handles 8-bit non-interlaced images of every colour type and
filter, which is what encoders (Chromium's screenshots, Pillow, ours) write by default.
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter

from agent.common.images import PNG_SIGNATURE

RGB = tuple[int, int, int]
MAX_DECODED_PIXELS = 4_000_000  # beyond this the colour is not worth the CPU of a test double
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(width: int, height: int, colour: RGB) -> bytes:
    """An RGB PNG of `colour`, with a thin band of its complement across the diagonal."""
    band = bytes(255 - c for c in colour)
    plain = bytes(colour)
    rows = []
    for y in range(height):
        x = y * width // height
        row = plain * x + band * min(2, width - x) + plain * max(0, width - x - 2)
        rows.append(b"\0" + row)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = zlib.compress(b"".join(rows), 6)
    return PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", body) + _chunk(b"IEND", b"")


def dominant_colour(data: bytes) -> RGB | None:
    """The most frequent colour of a PNG (sampled), None when it cannot be decoded here."""
    try:
        width, height, channels, palette, raw = _read(data)
    except (ValueError, struct.error, zlib.error):
        return None
    if width * height > MAX_DECODED_PIXELS:
        return None
    stride = width * channels
    pixels = _unfilter(raw, stride, channels, height)
    counts: Counter[RGB] = Counter()
    step = max(1, (width * height) // 20_000) * channels  # about 20,000 samples
    for at in range(0, len(pixels) - channels + 1, step):
        counts[_rgb(pixels[at : at + channels], channels, palette)] += 1
    return counts.most_common(1)[0][0] if counts else None


def _read(data: bytes) -> tuple[int, int, int, list[RGB], bytes]:
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG")
    at, idat, palette = 8, bytearray(), []
    width = height = channels = 0
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        chunk = data[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            if depth != 8 or interlace or colour_type not in _CHANNELS:
                raise ValueError("only 8-bit, non-interlaced PNGs are decoded")
            channels = _CHANNELS[colour_type]
        elif kind == b"PLTE":
            palette = [(chunk[i], chunk[i + 1], chunk[i + 2]) for i in range(0, len(chunk) - 2, 3)]
        elif kind == b"IDAT":
            idat += chunk
        at += 12 + length
    if not channels:
        raise ValueError("no IHDR")
    return width, height, channels, palette, zlib.decompress(bytes(idat))


def _unfilter(raw: bytes, stride: int, bpp: int, height: int) -> bytearray:
    """The pixel bytes of the filtered scanlines (filters None, Sub, Up, Average, Paeth)."""
    out = bytearray()
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous, strict=True))
        elif kind in (1, 3, 4):
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                up, corner = previous[i], previous[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + _predict(kind, left, up, corner)) & 0xFF
        out += line
        previous = line
    return out


def _predict(kind: int, left: int, up: int, corner: int) -> int:
    if kind == 1:
        return left
    if kind == 3:
        return (left + up) // 2
    guess = left + up - corner
    near_left, near_up, near_corner = abs(guess - left), abs(guess - up), abs(guess - corner)
    if near_left <= near_up and near_left <= near_corner:
        return left
    return up if near_up <= near_corner else corner


def _rgb(sample: bytes | bytearray, channels: int, palette: list[RGB]) -> RGB:
    if palette and channels == 1:
        return palette[sample[0]] if sample[0] < len(palette) else (0, 0, 0)
    if channels <= 2:  # grey, grey + alpha
        return (sample[0], sample[0], sample[0])
    return (sample[0], sample[1], sample[2])
