"""`browser_vision` end to end: a conversation through `AIAgent` against the simulated endpoint
(real HTTP, real openai SDK) navigates a page served on 127.0.0.1 in real Chromium and asks
about it; the screenshot reaches the vision model as a PNG data URL, its usage counts in the
prompt's, and the trajectory keeps the answer, not the image."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from agent.protocols import ToolConfig
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from run_agent import AIAgent
from tests.fixtures.browser import Worker
from tests.support.browser import browsing, call, serve_pages

QUESTION = "What colour is the square on the page?"


def image_parts(endpoint: SimulatedEndpoint) -> list[tuple[str, dict[str, Any]]]:
    """(model, image_url part) of every image the endpoint received."""
    found = []
    for request in endpoint.requests:
        for message in request.body["messages"]:
            if isinstance(message.get("content"), list):
                found += [(request.body["model"], p) for p in message["content"] if p["type"] == "image_url"]
    return found


def png_size(data_url: str) -> tuple[int, int]:
    prefix = "data:image/png;base64,"
    assert data_url.startswith(prefix)
    image = base64.b64decode(data_url[len(prefix) :])
    assert image[:8] == b"\x89PNG\r\n\x1a\n" and image[12:16] == b"IHDR"
    width, height = struct.unpack(">II", image[16:24])
    return width, height


def test_browser_vision_sends_the_screenshot_to_the_vision_model(
    sim_endpoint: SimulatedEndpoint, browser_worker: Worker
) -> None:
    with serve_pages() as (base, _paths):
        calls = [
            ("browser_navigate", json.dumps({"url": base + "/"})),
            ("browser_vision", json.dumps({"question": QUESTION, "annotate": True})),
        ]
        turns = [Turn(tool_calls=(c,)) for c in calls] + [Turn(content="ok")]
        sim_endpoint.script("Describe the page", turns)
        agent = AIAgent(
            base_url=sim_endpoint.base_url,
            api_key="sk-test-browser-vision",
            model="sim-model",
            max_retries=0,
            enabled_toolsets=["browser"],
            tools=ToolConfig(allow_hosts=("127.0.0.1",), vision_model="sim-vision"),
        )
        result = agent.run_conversation("Describe the page")
    assert result["completed"], result
    [(model, part)] = image_parts(sim_endpoint)
    assert model == "sim-vision"  # --vision_model, not the run's model
    assert png_size(part["image_url"]["url"]) == (1280, 800)  # the viewport, not the whole page
    vision = json.loads([m for m in result["messages"] if m["role"] == "tool"][1]["content"])
    # The simulated model describes the image bytes it received: the screenshot arrived whole.
    assert "a PNG image, 1280x800 pixels" in vision["answer"]
    assert "data:image" not in json.dumps(result["messages"])  # the image stays out of the trajectory
    # The screenshot's tokens (about 4 characters each) count in the prompt's usage.
    assert result["usage"]["prompt_tokens"] > len(part["image_url"]["url"]) // 4


def test_annotate_draws_the_refs_and_leaves_the_page_as_it_was(
    sim_endpoint: SimulatedEndpoint, browser_worker: Worker
) -> None:
    from agent.llm.factory import open_chat_model
    from run_agent import agent_config

    async def scenario() -> None:
        config = agent_config(base_url=sim_endpoint.base_url, api_key="sk-test-browser-vision", model="m")
        model = open_chat_model(config)
        try:
            loopback = ToolConfig(allow_hosts=("127.0.0.1",))
            async with browsing(loopback, browser_worker.shared, model) as tools:
                with serve_pages() as (base, _paths):
                    await call(tools, "browser_navigate", url=base + "/")
                    for annotate in (False, True, False):
                        answer = await call(tools, "browser_vision", question="q", annotate=annotate)
                        assert answer["answer"] and "error" not in answer
                    layer = "document.getElementById('__agent_refs') === null"
                    assert (await call(tools, "browser_console", expression=layer))["result"] is True
        finally:
            await model.aclose()

    browser_worker.run(scenario())
    urls = [part["image_url"]["url"] for _model, part in image_parts(sim_endpoint)]
    plain, annotated, plain_again = urls
    assert plain == plain_again  # the same page gives the same screenshot …
    assert annotated != plain  # … and the labels changed what it shows
