"""`mixture_of_agents` against the simulated endpoint over real HTTP: N reference calls in
parallel plus one aggregation, each with the right model, the references' answers handed to
the aggregator, all usage counted; a failing reference model left out and named; all failing
or the aggregator failing as tool results; unavailable without --moa_models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agent.protocols import Sandbox, ToolConfig
from agent.servers.simulated.server import SimulatedEndpoint
from agent.toolbox.context import SandboxContext
from tests.support.media import sim_prompt_tokens, tool_context
from tools import moa

pytestmark = pytest.mark.anyio
MODELS = ("sim-model", "ref-a", "ref-b", "ref-c", "judge")
QUESTION = "Prove that there are infinitely many primes."


async def ask(
    endpoint: SimulatedEndpoint, sandbox: Sandbox, config: ToolConfig
) -> tuple[Any, SandboxContext]:
    async with tool_context(endpoint, sandbox, config) as context:
        return await moa.mixture_of_agents({"user_prompt": QUESTION}, context), context


async def test_references_in_parallel_then_the_aggregator(
    make_sim_endpoint: Callable[..., SimulatedEndpoint], local_sandbox: Sandbox
) -> None:
    endpoint = make_sim_endpoint(model_ids=MODELS, latency=0.3)
    config = ToolConfig(moa_models=("ref-a", "ref-b", "ref-c"), moa_aggregator="judge")
    result, context = await ask(endpoint, local_sandbox, config)
    requests = endpoint.requests
    assert [r.body["model"] for r in requests[:3]] == ["ref-a", "ref-b", "ref-c"]
    assert requests[3].body["model"] == "judge" and len(requests) == 4
    assert requests[2].received_at - requests[0].received_at < 0.25  # in parallel, not one by one
    system = requests[3].body["messages"][0]["content"]
    for name in ("ref-a", "ref-b", "ref-c"):  # each reference's own answer reached the aggregator
        assert f"[{name}]\nHere is my answer to: {QUESTION}\n(answered by {name})" in system
    assert requests[3].body["messages"][1] == {"role": "user", "content": QUESTION}
    assert result == {
        "response": f"Here is my answer to: {QUESTION}\n(answered by judge)",
        "reference_models": ["ref-a", "ref-b", "ref-c"],
        "failed_models": [],
    }
    assert context.usage.prompt_tokens == sum(sim_prompt_tokens(r.body) for r in requests)


async def test_a_failing_reference_is_left_out_and_named(
    make_sim_endpoint: Callable[..., SimulatedEndpoint], local_sandbox: Sandbox
) -> None:
    endpoint = make_sim_endpoint(model_ids=MODELS, reject_unknown_models=True)
    config = ToolConfig(moa_models=("ref-a", "ref-gone", "ref-c"))  # aggregator: the run's model
    result, _ = await ask(endpoint, local_sandbox, config)
    assert result["reference_models"] == ["ref-a", "ref-c"]
    assert [f["model"] for f in result["failed_models"]] == ["ref-gone"]
    assert result["failed_models"][0]["error"].startswith("not_found:")
    aggregation = endpoint.requests[-1].body
    assert aggregation["model"] == "sim-model" and "ref-gone" not in aggregation["messages"][0]["content"]
    assert result["response"] == f"Here is my answer to: {QUESTION}"


async def test_all_references_or_the_aggregator_failing_is_an_error(
    make_sim_endpoint: Callable[..., SimulatedEndpoint], local_sandbox: Sandbox
) -> None:
    endpoint = make_sim_endpoint(model_ids=MODELS, reject_unknown_models=True)
    none_left, _ = await ask(endpoint, local_sandbox, ToolConfig(moa_models=("x", "y")))
    assert none_left["error"] == "every reference model failed"
    assert [f["model"] for f in none_left["failed_models"]] == ["x", "y"]
    bad_judge = ToolConfig(moa_models=("ref-a",), moa_aggregator="missing-judge")
    no_aggregate, _ = await ask(endpoint, local_sandbox, bad_judge)
    assert no_aggregate["error"].startswith("the aggregator model failed: not_found")


def test_it_is_offered_only_with_reference_models() -> None:
    reason = moa.unavailable(ToolConfig())
    assert reason is not None and "--moa_models" in reason
    assert moa.unavailable(ToolConfig(moa_models=("a",))) is None
