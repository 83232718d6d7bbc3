"""What the model-calling tools cost per use at the simulated endpoint: vision_analyze on a
1280x720 PNG, image_generate through the images API (1536x1024), and mixture_of_agents with 3
reference models, each through the real HTTP client. Prints the median wall time per use and
the tokens one use adds to the prompt's usage.

    python -m bench.media_tools [--latency=0.2] [--uses=15]

With `--latency=L` every endpoint call takes L seconds, so mixture_of_agents takes about 2L
(the references at once, then the aggregation) plus what the runner adds.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import fire

from agent.common.images import to_data_url
from agent.llm.client import OpenAIChatModel
from agent.protocols import ToolConfig, Usage
from agent.servers.simulated.png import encode_png
from agent.servers.simulated.server import SimulatedEndpoint
from agent.toolbox.context import SandboxContext
from tools import image_gen, moa, vision

Use = Callable[[SandboxContext], Awaitable[Any]]


async def _measure(name: str, use: Use, model: OpenAIChatModel, config: ToolConfig, uses: int) -> None:
    times = []
    usage = Usage()
    for _ in range(uses):
        context = SandboxContext(None, config, model)  # type: ignore[arg-type]  # none needs a sandbox
        started = time.perf_counter()
        result = await use(context)
        times.append(time.perf_counter() - started)
        if isinstance(result, dict) and "error" in result:
            raise SystemExit(f"{name}: {result['error']}")
        usage = context.usage  # of one use
    print(
        f"{name:<40} median {statistics.median(times) * 1000:7.1f} ms per use, "
        f"+{usage.prompt_tokens} prompt / +{usage.completion_tokens} completion tokens"
    )


async def _run(latency: float, uses: int) -> None:
    models = ("sim-model", "ref-a", "ref-b", "ref-c", "judge")
    picture = to_data_url(encode_png(1280, 720, (10, 20, 30)), "image/png")
    with (
        SimulatedEndpoint(model_ids=models, latency=latency, record=False) as endpoint,
        tempfile.TemporaryDirectory() as artifacts,
    ):
        model = OpenAIChatModel(base_url=endpoint.base_url, api_key="none", model="sim-model")
        config = ToolConfig(
            artifacts_dir=artifacts, image_api="images", moa_models=models[1:4], moa_aggregator="judge"
        )
        cases: dict[str, Use] = {
            "vision_analyze (1280x720 PNG)": lambda c: vision.vision_analyze(
                {"image_url": picture, "question": "What is shown?"}, c
            ),
            "image_generate (images API, 1536x1024)": lambda c: image_gen.image_generate(
                {"prompt": "a lighthouse"}, c
            ),
            "mixture_of_agents (3 references)": lambda c: moa.mixture_of_agents(
                {"user_prompt": "Prove that there are infinitely many primes."}, c
            ),
        }
        try:
            for name, use in cases.items():
                await _measure(name, use, model, config, uses)
        finally:
            await model.aclose()


def main(latency: float = 0.0, uses: int = 15) -> None:
    print(f"simulated endpoint, {latency:g} s per call, {uses} uses each")
    asyncio.run(_run(latency, uses))


if __name__ == "__main__":
    fire.Fire(main)
