"""Images on both sides of the wire: header sniffing and data URLs (agent.common.images), the
simulated endpoint's PNGs, its descriptions of images it is shown, `/v1/images/generations`
and image-output chat replies, and the HTTP client's `generate_image` against them (real
HTTP through the real openai SDK)."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import openai
import pytest

from agent.common.images import PNG_SIGNATURE, from_data_url, sniff, to_data_url
from agent.config.agent_config import AgentConfig
from agent.errors import ModelAPIError
from agent.llm.client import OpenAIChatModel
from agent.llm.factory import open_chat_model
from agent.llm.images import DEFAULT_MODELS
from agent.protocols import ImageModel, ImageRequest
from agent.servers.simulated.images import aspect_size, colour_name, describe, prompt_colour
from agent.servers.simulated.png import dominant_colour, encode_png
from agent.servers.simulated.server import SimulatedEndpoint, Turn

pytestmark = pytest.mark.anyio


def jpeg_header(width: int, height: int) -> bytes:
    """The start of a baseline JPEG: SOI, an APP0 segment, then SOF0 with the size."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\0"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


def filtered_png(width: int, height: int, colour: tuple[int, int, int]) -> bytes:
    """An RGBA PNG whose rows use the Sub, Up, Average and Paeth filters in turn (as real
    encoders write them), of one colour."""
    pixel = bytes((*colour, 255))
    plain_rows = [pixel * width for _ in range(height)]
    raw = bytearray()
    previous = bytes(width * 4)
    for y, row in enumerate(plain_rows):
        kind = 1 + y % 4
        raw.append(kind)
        for i, value in enumerate(row):
            left = row[i - 4] if i >= 4 else 0
            up, corner = previous[i], previous[i - 4] if i >= 4 else 0
            guess = {1: left, 2: up, 3: (left + up) // 2}.get(kind)
            if guess is None:
                p = left + up - corner
                guess = min((abs(p - left), 0, left), (abs(p - up), 1, up), (abs(p - corner), 2, corner))[2]
            raw.append((value - guess) & 0xFF)
        previous = row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b"")
    return PNG_SIGNATURE + body


def shape(data: bytes) -> tuple[str, int, int] | None:
    info = sniff(data)
    return None if info is None else (info.format, info.width, info.height)


def test_sniff_reads_the_size_of_each_format() -> None:
    gif = b"GIF89a" + struct.pack("<HH", 40, 20) + b"\0" * 10
    webp = b"RIFF\0\0\0\0WEBPVP8X" + b"\0" * 8 + (99).to_bytes(3, "little") + (49).to_bytes(3, "little")
    assert shape(encode_png(7, 3, (1, 2, 3))) == ("png", 7, 3)
    assert shape(jpeg_header(640, 480)) == ("jpeg", 640, 480)
    assert shape(gif) == ("gif", 40, 20)
    assert shape(webp) == ("webp", 100, 50)
    assert shape(b"<html>not an image</html>") is None
    assert shape(PNG_SIGNATURE + b"\0\0") is None  # a header cut short
    assert sniff(jpeg_header(1, 1)) is not None and sniff(jpeg_header(1, 1)).mime == "image/jpeg"  # type: ignore[union-attr]


def test_data_urls_round_trip_and_bad_ones_say_why() -> None:
    assert from_data_url(to_data_url(b"\x89PNG", "image/png")) == ("image/png", b"\x89PNG")
    with pytest.raises(ValueError, match="base64-encoded"):
        from_data_url("data:image/png,rawtext")
    with pytest.raises(ValueError, match="invalid"):
        from_data_url("data:image/png;base64,***")


def test_encoded_pngs_decode_to_their_colour_whatever_the_filters() -> None:
    png = encode_png(64, 32, (200, 10, 10))
    assert zlib.crc32(png[12:29]) == struct.unpack(">I", png[29:33])[0]  # IHDR's CRC is right
    assert dominant_colour(png) == (200, 10, 10)
    assert dominant_colour(filtered_png(9, 8, (10, 120, 240))) == (10, 120, 240)
    assert dominant_colour(b"not a png") is None


def test_descriptions_depend_on_the_bytes() -> None:
    red, blue = encode_png(30, 20, (220, 30, 30)), encode_png(30, 20, (30, 60, 220))
    assert "PNG image, 30x20 pixels, mostly red (#dc1e1e)" in describe(red)
    assert "mostly blue" in describe(blue)
    assert "JPEG image, 640x480 pixels" in describe(jpeg_header(640, 480))
    assert "not an image" in describe(b"hello")
    assert colour_name((250, 250, 250)) == "white"
    assert aspect_size("3:2") == (1024, 682) and aspect_size("2:3") == (682, 1024)


def test_chat_with_an_image_part_is_answered_with_its_description(sim_endpoint: SimulatedEndpoint) -> None:
    client = openai.OpenAI(base_url=sim_endpoint.base_url, api_key="none", max_retries=0)
    url = to_data_url(encode_png(48, 16, (30, 170, 60)), "image/png")
    content = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    reply = client.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": content}])  # type: ignore[list-item,misc]
    assert reply.choices[0].message.content is not None
    assert reply.choices[0].message.content.startswith("Image 1: a PNG image, 48x16 pixels, mostly green")


def test_images_endpoint_returns_a_real_png_of_the_size_asked(sim_endpoint: SimulatedEndpoint) -> None:
    client = openai.OpenAI(base_url=sim_endpoint.base_url, api_key="none", max_retries=0)
    result = client.images.generate(model="img", prompt="a lighthouse", size="1536x1024")
    assert result.data and result.data[0].b64_json
    png = base64.b64decode(result.data[0].b64_json)
    assert shape(png) == ("png", 1536, 1024)
    assert dominant_colour(png) == prompt_colour("a lighthouse")  # the colour comes from the prompt
    assert sim_endpoint.requests[-1].path == "/v1/images/generations"
    with pytest.raises(openai.BadRequestError, match="size must be"):
        client.images.generate(model="img", prompt="x", size="99999x1")  # type: ignore[arg-type]


async def test_the_client_generates_images_by_both_apis_through_retries(
    make_sim_endpoint: Callable[..., SimulatedEndpoint],
) -> None:
    endpoint = make_sim_endpoint(rate_429=0.3, retry_after=0.01, seed=1)  # 429s on the first two calls
    async with client_for(endpoint) as model:
        assert isinstance(model, ImageModel)
        for api, size in (("images", (1024, 1536)), ("chat", (682, 1024))):
            request = ImageRequest("a red fox", api, "1024x1536", "2:3", model="img-model")
            reply = await model.generate_image(request)
            image = reply.images[0]
            assert isinstance(image, bytes)
            info = sniff(image)
            assert info is not None and (info.width, info.height) == size
            assert reply.usage.total_tokens > 0
    bodies = [r.body for r in endpoint.requests]
    assert any(b.get("modalities") == ["image", "text"] for b in bodies)
    assert endpoint.stats.faults.get("429", 0) > 0  # retried past the rate limits


async def test_a_url_answer_is_returned_as_a_link_and_a_wordy_chat_reply_is_no_image(
    sim_endpoint: SimulatedEndpoint,
) -> None:
    sim_endpoint.script("draw", [Turn(content="I cannot draw")])
    async with client_for(sim_endpoint) as model:
        with pytest.raises(ModelAPIError, match="holds no image: the model said 'I cannot draw'"):
            await model.generate_image(ImageRequest("draw", "chat", "1x1", "1:1"))
    client = openai.OpenAI(base_url=sim_endpoint.base_url, api_key="none", max_retries=0)
    result = client.images.generate(model="img", prompt="a cat", size="64x64", response_format="url")
    assert result.data and result.data[0].url and result.data[0].url.startswith("http://127.0.0.1:")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def client_for(endpoint: SimulatedEndpoint) -> AsyncIterator[OpenAIChatModel]:
    model = OpenAIChatModel(base_url=endpoint.base_url, api_key="none", model="sim-model", seed=1)
    try:
        yield model
    finally:
        await model.aclose()


def test_injected_faults_apply_to_the_images_endpoint(
    make_sim_endpoint: Callable[..., SimulatedEndpoint],
) -> None:
    endpoint = make_sim_endpoint(rate_5xx=1.0)
    client = openai.OpenAI(base_url=endpoint.base_url, api_key="none", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.images.generate(model="img", prompt="x")


@pytest.mark.parametrize(
    ("dialect", "path"), [("openrouter", "/v1/chat/completions"), ("generic", "/v1/images/generations")]
)
async def test_auto_asks_openrouter_for_a_chat_image_and_others_the_images_endpoint(
    sim_endpoint: SimulatedEndpoint, dialect: str, path: str
) -> None:
    config = AgentConfig(base_url=sim_endpoint.base_url, model="sim-model", api_dialect=dialect)
    model = open_chat_model(config)
    try:
        reply = await model.generate_image(ImageRequest("a kite", "auto", "1024x1024", "1:1"))
    finally:
        await model.aclose()
    assert sniff(reply.images[0]) is not None  # type: ignore[arg-type]
    (request,) = sim_endpoint.requests
    assert request.path == path
    assert request.body["model"] == DEFAULT_MODELS["chat" if dialect == "openrouter" else "images"]
    hosted = open_chat_model(AgentConfig(base_url="https://openrouter.ai/api/v1", api_key="sk-or-test-12345"))
    assert hosted.image_api == "chat"
    await hosted.aclose()
