"""The simulated endpoint's default policy: for every tool of every toolset it picks valid
arguments (so unscripted runs exercise each tool), url arguments name its `tool_url`."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from agent.servers.simulated.replies import DEFAULT_TOOL_URL, RED_PIXEL, choose_tool_call
from agent.servers.simulated.server import SimulatedEndpoint
from agent.toolbox.arguments import validate_arguments
from agent.toolbox.registry import ALL_TOOLS, TOOLSETS


def definition(name: str) -> dict[str, Any]:
    return {"type": "function", "function": ALL_TOOLS[name].schema}


@pytest.mark.parametrize("name", sorted(ALL_TOOLS))
def test_every_tool_alone_gets_valid_arguments(name: str) -> None:
    chosen, arguments = choose_tool_call([definition(name)], "http://127.0.0.1:9/page")
    assert chosen == name
    assert validate_arguments(arguments, ALL_TOOLS[name].schema["parameters"]) == []
    for key, value in arguments.items():
        if key == "url":
            assert value == "http://127.0.0.1:9/page"
        if key == "urls":
            assert value == ["http://127.0.0.1:9/page"]


@pytest.mark.parametrize("toolset", sorted(TOOLSETS))
def test_each_toolset_alone_calls_a_tool_that_works_on_its_own(toolset: str) -> None:
    chosen, _ = choose_tool_call([definition(tool) for tool in sorted(TOOLSETS[toolset].tool_names)])
    standalone = {
        "web": "web_search",
        "vision": "vision_analyze",
        "image_gen": "image_generate",
        "terminal": "terminal",
        "file": "write_file",
        "moa": "mixture_of_agents",
        "browser": "browser_navigate",  # never a click or snapshot before any page
    }
    assert chosen == standalone[toolset]


def test_the_known_values_are_usable_without_a_network() -> None:
    _, vision = choose_tool_call([definition("vision_analyze")])
    assert vision["image_url"] == RED_PIXEL and RED_PIXEL.startswith("data:image/png;base64,")
    _, process = choose_tool_call([definition("process")])
    assert process == {"action": "list"}  # the one action that needs no session
    _, navigate = choose_tool_call([definition("browser_navigate")])
    assert navigate == {"url": DEFAULT_TOOL_URL}


def test_the_endpoint_sends_url_tools_to_its_tool_url() -> None:
    with SimulatedEndpoint(tool_url="http://127.0.0.1:8123/start.html") as endpoint:
        client = openai.OpenAI(base_url=endpoint.base_url, api_key="unused", max_retries=0)
        try:
            reply = client.chat.completions.create(
                model="sim-model",
                messages=[{"role": "user", "content": "open the page"}],
                tools=[definition("browser_navigate"), definition("browser_click")],  # type: ignore[list-item]
            )
        finally:
            client.close()
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.function.name == "browser_navigate"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"url": "http://127.0.0.1:8123/start.html"}  # type: ignore[union-attr]
