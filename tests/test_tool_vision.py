"""`vision_analyze` against the simulated endpoint over real HTTP (the real openai SDK): the
image from a data: URL, a file in a real local sandbox, or a real HTTP server on 127.0.0.1
(allowed with --allow_hosts), described by the endpoint from the bytes it received; and every
way it fails as a tool result: refused by the network policy (also after a redirect), not an
image, too big, missing, the model failing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from agent.common.images import to_data_url
from agent.protocols import Sandbox, ToolConfig
from agent.servers.simulated.png import encode_png
from agent.servers.simulated.server import SimulatedEndpoint
from agent.toolbox.context import SandboxContext
from tests.support.media import Answer, serving, tool_context
from tools import vision

pytestmark = pytest.mark.anyio
GREEN = encode_png(48, 16, (30, 170, 60))
LOCAL = ("127.0.0.1",)


async def analyze(context: SandboxContext, image_url: str, question: str = "What is it?") -> Any:
    return await vision.vision_analyze({"image_url": image_url, "question": question}, context)


async def test_a_data_url_reaches_the_model_with_the_question(
    sim_endpoint: SimulatedEndpoint, local_sandbox: Sandbox
) -> None:
    config = ToolConfig(vision_model="sim-vision")
    async with tool_context(sim_endpoint, local_sandbox, config) as context:
        result = await analyze(context, to_data_url(GREEN, "image/png"), "Which colour?")
    assert isinstance(result, str)
    assert result.startswith("Image 1: a PNG image, 48x16 pixels, mostly green")
    body = sim_endpoint.requests[-1].body
    assert body["model"] == "sim-vision"  # --vision_model, not the run's model
    assert body["messages"][0]["content"][0] == {"type": "text", "text": "Which colour?"}
    assert "tools" not in body
    assert context.usage.prompt_tokens > 0 and context.usage.completion_tokens > 0


async def test_a_file_in_the_sandbox_is_sent_as_base64(
    sim_endpoint: SimulatedEndpoint, local_sandbox: Sandbox
) -> None:
    await local_sandbox.write_file("shots/screen.png", encode_png(20, 10, (220, 30, 30)))
    async with tool_context(sim_endpoint, local_sandbox) as context:
        result = await analyze(context, "shots/screen.png")
        missing = await analyze(context, "shots/none.png")
        not_image = await analyze(context, "shots")
    assert isinstance(result, str) and "20x10 pixels, mostly red" in result
    url = sim_endpoint.requests[-1].body["messages"][0]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert sim_endpoint.requests[-1].body["model"] == "sim-model"  # default: the run's model
    assert missing == {"error": "File not found: shots/none.png"}
    assert "error" in not_image  # a directory


async def test_an_http_image_is_fetched_only_when_the_policy_allows_it(
    sim_endpoint: SimulatedEndpoint, local_sandbox: Sandbox
) -> None:
    answers = {"/green.png": Answer(body=GREEN, headers={"Content-Type": "image/png"})}
    with serving(answers) as site:
        async with tool_context(sim_endpoint, local_sandbox) as context:
            refused = await analyze(context, f"{site.url}/green.png")
        assert site.hits == []  # refused before any connection
        async with tool_context(sim_endpoint, local_sandbox, ToolConfig(allow_hosts=LOCAL)) as context:
            result = await analyze(context, f"{site.url}/green.png")
    assert "refused by the network policy" in refused["error"]
    assert isinstance(result, str) and "48x16 pixels, mostly green" in result
    assert len(sim_endpoint.requests) == 1


async def test_what_is_no_image_or_too_big_or_redirected_away_is_an_error(
    sim_endpoint: SimulatedEndpoint, local_sandbox: Sandbox
) -> None:
    answers = {
        "/page": Answer(body=b"<html>hi</html>", headers={"Content-Type": "text/html"}),
        "/lying.png": Answer(body=b"<html>hi</html>", headers={"Content-Type": "image/png"}),
        "/huge.png": Answer(headers={"Content-Type": "image/png", "Content-Length": str(64 * 2**20)}),
        "/away": Answer(302, headers={"Location": "http://169.254.169.254/latest/meta-data"}),
        "/gone": Answer(404),
    }
    config = ToolConfig(allow_hosts=LOCAL)
    with serving(answers) as site:
        async with tool_context(sim_endpoint, local_sandbox, config) as context:
            errors = {path: await analyze(context, site.url + path) for path in answers}
            bad_data = await analyze(context, "data:image/png;base64,@@@")
            scheme = await analyze(context, "ftp://example.com/a.png")
            unparsable = await analyze(context, "http://[::1/a.png")
    assert "not an image (Content-Type: text/html)" in errors["/page"]["error"]
    assert "not a PNG, JPEG, GIF or WebP image" in errors["/lying.png"]["error"]
    assert "more than the 20971520-byte limit" in errors["/huge.png"]["error"]
    assert "169.254.169.254" in errors["/away"]["error"] and "refused" in errors["/away"]["error"]
    assert "HTTP 404" in errors["/gone"]["error"]
    assert "invalid" in bad_data["error"]
    assert "only http(s) URLs" in scheme["error"]
    assert unparsable["error"].startswith("http://[::1/a.png: ")
    assert sim_endpoint.requests == []  # nothing reached the model


async def test_a_failing_vision_model_is_a_tool_result(
    make_sim_endpoint: Callable[..., SimulatedEndpoint], local_sandbox: Sandbox
) -> None:
    endpoint = make_sim_endpoint(rate_5xx=1.0)
    async with tool_context(endpoint, local_sandbox) as context:
        result = await analyze(context, to_data_url(GREEN, "image/png"))
    assert result["error"].startswith("the vision model failed (server_error)")
    assert json.dumps(result)  # JSON-able, as every tool result
