"""`image_generate` against the simulated endpoint over real HTTP: through the images endpoint
(base64, or a link fetched under the network policy) and through an image-output chat model;
real PNG files of the asked shape saved under the artifacts directory, numbered without
overwriting; a result that names the file and never holds its bytes; availability."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agent.common.images import PNG_SIGNATURE, sniff
from agent.protocols import Sandbox, ToolConfig
from agent.servers.simulated.server import SimulatedEndpoint
from agent.toolbox.context import SandboxContext
from tests.support.media import BASE64_RUN, tool_context
from tools import image_gen

pytestmark = pytest.mark.anyio


async def generate(context: SandboxContext, prompt: str, aspect: str | None = None) -> Any:
    args = {"prompt": prompt} | ({"aspect_ratio": aspect} if aspect else {})
    return await image_gen.image_generate(args, context)


def saved(root: Path, result: dict[str, Any]) -> tuple[str, int, int]:
    data = (root / result["path"]).read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) == result["bytes"]
    info = sniff(data)
    assert info is not None
    return info.format, info.width, info.height


async def test_images_are_saved_as_real_pngs_and_only_referenced(
    sim_endpoint: SimulatedEndpoint, local_sandbox: Sandbox, tmp_path: Path
) -> None:
    config = ToolConfig(artifacts_dir=str(tmp_path), image_api="images", image_model="gpt-image-1")
    async with tool_context(sim_endpoint, local_sandbox, config) as context:
        first = await generate(context, "a lighthouse at dusk")
        second = await generate(context, "a tall tower", "portrait")
        square = await generate(context, "a tile", "square")
    assert first["path"] == "images/direct-1.png" and second["path"] == "images/direct-2.png"
    assert saved(tmp_path, first) == ("png", 1536, 1024)  # landscape, the default
    assert saved(tmp_path, second) == ("png", 1024, 1536)
    assert saved(tmp_path, square) == ("png", 1024, 1024)
    assert (first["width"], first["height"], first["format"]) == (1536, 1024, "png")
    assert first["markdown"] == "![a lighthouse at dusk](images/direct-1.png)"
    assert not BASE64_RUN.search(json.dumps([first, second, square]))
    body = sim_endpoint.requests[0].body
    assert (sim_endpoint.requests[0].path, body["model"], body["size"]) == (
        "/v1/images/generations",
        "gpt-image-1",
        "1536x1024",
    )
    assert context.usage.total_tokens > 0  # the images API's usage counts in the prompt's
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == [
        "direct-1.png",
        "direct-2.png",
        "direct-3.png",
    ]  # no partial files left behind


async def test_an_image_output_chat_model_is_asked_with_modalities(
    sim_endpoint: SimulatedEndpoint, local_sandbox: Sandbox, tmp_path: Path
) -> None:
    config = ToolConfig(artifacts_dir=str(tmp_path), image_api="chat", image_model="sim-painter")
    async with tool_context(sim_endpoint, local_sandbox, config) as context:
        result = await generate(context, "a red fox", "portrait")
    assert saved(tmp_path, result) == ("png", 682, 1024)
    body = sim_endpoint.requests[-1].body
    assert body["modalities"] == ["image", "text"] and body["image_config"] == {"aspect_ratio": "2:3"}
    assert body["model"] == "sim-painter" and sim_endpoint.requests[-1].path == "/v1/chat/completions"


async def test_a_linked_image_is_downloaded_under_the_network_policy(
    sim_endpoint: SimulatedEndpoint, local_sandbox: Sandbox, tmp_path: Path
) -> None:
    # dall-e answers with a link by default; here the link points at the loopback endpoint.
    config = ToolConfig(artifacts_dir=str(tmp_path), image_api="images", image_model="dall-e-3")
    async with tool_context(sim_endpoint, local_sandbox, config) as context:
        refused = await generate(context, "a boat", "square")
    allowed = ToolConfig(**{**config.__dict__, "allow_hosts": ("127.0.0.1",)})
    async with tool_context(sim_endpoint, local_sandbox, allowed) as context:
        result = await generate(context, "a boat", "square")
    assert "could not be downloaded" in refused["error"] and "refused" in refused["error"]
    assert saved(tmp_path, result) == ("png", 1024, 1024)


async def test_a_failing_image_model_is_a_tool_result(
    make_sim_endpoint: Callable[..., SimulatedEndpoint], local_sandbox: Sandbox, tmp_path: Path
) -> None:
    endpoint = make_sim_endpoint(model_ids=("sim-model",), reject_unknown_models=True)
    config = ToolConfig(artifacts_dir=str(tmp_path), image_api="images", image_model="no-such-model")
    async with tool_context(endpoint, local_sandbox, config) as context:
        result = await generate(context, "anything")
        empty = await generate(context, "   ")
    assert result["error"].startswith("the image model failed (not_found)")
    assert "no-such-model" in result["error"]
    assert empty == {"error": "prompt is empty: describe the image to generate"}
    assert not (tmp_path / "images").exists()


def test_it_is_offered_only_where_images_can_be_saved(tmp_path: Path) -> None:
    reason = image_gen.unavailable(ToolConfig())
    assert reason is not None and "batch_runner.py uses the run directory" in reason
    assert image_gen.unavailable(ToolConfig(artifacts_dir=str(tmp_path))) is None


def test_concurrent_saves_never_overwrite(tmp_path: Path) -> None:
    def save(i: int) -> str:
        return image_gen.save_image(tmp_path, "key-0", bytes([i]) * 100_000, "png")

    with ThreadPoolExecutor(8) as pool:
        paths = list(pool.map(save, range(8)))
    assert sorted(paths) == sorted(f"images/key-0-{n}.png" for n in range(1, 9))
    assert sorted((tmp_path / p).read_bytes()[0] for p in paths) == list(range(8))  # each its own
    assert image_gen.save_image(tmp_path, "key-0", b"j", "jpeg") == "images/key-0-9.jpg"
    assert not [p for p in (tmp_path / "images").iterdir() if p.name.startswith(".partial")]
