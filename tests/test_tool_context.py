"""The context a tool call runs in (`agent.toolbox.context`), end to end through `AIAgent`
against the simulated endpoint (real HTTP, real openai SDK) with real local sandboxes:
sandboxes made on the first tool call only, resources closed with the conversation (last
opened first), a sandbox that cannot be made failing the prompt rather than becoming a tool
result, and model calls made by tools counting in the prompt's usage."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.errors import SandboxStartError, SandboxUnavailable
from agent.protocols import ChatRequest, Sandbox, SandboxSpec, ToolConfig, ToolContext, ToolSpec
from agent.sandboxes import SandboxOptions, sandbox_factory
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.toolbox.registry import ResolvedTools
from run_agent import AIAgent

SCHEMA = {"name": "probe", "description": "probe", "parameters": {"type": "object", "properties": {}}}


class CountingFactory:
    """Local sandboxes, counting how many were opened and closed."""

    def __init__(self, root: Path, events: list[str]) -> None:
        self.inner = sandbox_factory(SandboxOptions(backend="local", root=str(root)))
        self.events = events

    def __call__(self, spec: SandboxSpec) -> AbstractAsyncContextManager[Sandbox]:
        return self._session(spec)

    @asynccontextmanager
    async def _session(self, spec: SandboxSpec) -> AsyncIterator[Sandbox]:
        async with self.inner(spec) as sandbox:
            self.events.append("sandbox opened")
            yield sandbox
            self.events.append("sandbox closing")


def tools_of(*specs: ToolSpec) -> ResolvedTools:
    return ResolvedTools(specs, [{"type": "function", "function": s.schema} for s in specs], ["probe"], {})


def agent_for(endpoint: SimulatedEndpoint, factory: Any, tools: ResolvedTools | None = None) -> AIAgent:
    return AIAgent(
        base_url=endpoint.base_url,
        api_key="sk-test-context",
        model="sim-model",
        max_retries=0,
        enabled_toolsets=["terminal"],
        sandbox_factory_=factory,
        tools_=tools,
    )


def test_a_conversation_without_tool_calls_makes_no_sandbox(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    events: list[str] = []
    sim_endpoint.script("just answer", [Turn(content="hello", reasoning="r")])
    result = agent_for(sim_endpoint, CountingFactory(tmp_path, events)).run_conversation("just answer")
    assert result["outcome"] == "completed"
    assert events == []


def test_the_sandbox_is_made_on_the_first_tool_call_and_closed_at_the_end(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    events: list[str] = []
    terminal = ("terminal", json.dumps({"command": "echo one"}))
    turns = [Turn(tool_calls=(terminal,)), Turn(tool_calls=(terminal,)), Turn(content="done")]
    sim_endpoint.script("two commands", turns)
    result = agent_for(sim_endpoint, CountingFactory(tmp_path, events)).run_conversation("two commands")
    assert result["outcome"] == "completed"
    assert events == ["sandbox opened", "sandbox closing"]  # one sandbox for both calls


def test_resources_close_with_the_conversation_last_opened_first(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def browser() -> AsyncIterator[str]:
        events.append("resource opened")
        yield "a browser"
        events.append("resource closed")

    async def probe(args: Mapping[str, Any], context: ToolContext) -> Any:
        sandbox = await context.sandbox()
        first = await context.resource("browser", browser)
        again = await context.resource("browser", browser)  # opened once
        return {"resource": first, "same": first is again, "workdir": sandbox.workdir}

    sim_endpoint.script(
        "probe twice", [Turn(tool_calls=(("probe", "{}"), ("probe", "{}"))), Turn(content="ok")]
    )
    agent = agent_for(
        sim_endpoint, CountingFactory(tmp_path, events), tools_of(ToolSpec("probe", SCHEMA, probe))
    )
    result = agent.run_conversation("probe twice")
    assert result["outcome"] == "completed"
    answers = [json.loads(m["content"]) for m in result["messages"] if m["role"] == "tool"]
    assert [a["resource"] for a in answers] == ["a browser", "a browser"] and answers[0]["same"]
    assert events == ["sandbox opened", "resource opened", "resource closed", "sandbox closing"]


def test_a_sandbox_that_cannot_be_made_fails_the_prompt_not_the_tool(
    sim_endpoint: SimulatedEndpoint,
) -> None:
    def broken(spec: SandboxSpec) -> AbstractAsyncContextManager[Sandbox]:
        @asynccontextmanager
        async def session() -> AsyncIterator[Sandbox]:
            raise SandboxUnavailable("the engine went away")
            yield  # pragma: no cover

        return session()

    terminal = ("terminal", json.dumps({"command": "echo one"}))
    sim_endpoint.script("needs a sandbox", [Turn(tool_calls=(terminal,)), Turn(content="done")])
    with pytest.raises(SandboxStartError, match="the engine went away"):
        agent_for(sim_endpoint, broken).run_conversation("needs a sandbox")
    assert len(sim_endpoint.requests) == 1  # the model was not told a tool failed


def test_model_calls_made_by_a_tool_count_in_the_prompts_usage(sim_endpoint: SimulatedEndpoint) -> None:
    def tool(count: bool) -> ToolSpec:
        async def ask_another_model(args: Mapping[str, Any], context: ToolContext) -> Any:
            request = ChatRequest([{"role": "user", "content": "second opinion"}], [], model="other-model")
            reply = await context.model.complete(request)
            if count:
                context.add_usage(reply.usage)
            return {"answer": reply.content, "tokens": reply.usage.total_tokens}

        return ToolSpec("probe", SCHEMA, ask_another_model)

    sim_endpoint.script("ask", [Turn(tool_calls=(("probe", "{}"),)), Turn(content="done")])
    sim_endpoint.script("second opinion", [Turn(content="they agree")])
    counted = agent_for(sim_endpoint, None, tools_of(tool(True))).run_conversation("ask")
    assert [r.body["model"] for r in sim_endpoint.requests] == ["sim-model", "other-model", "sim-model"]
    uncounted = agent_for(sim_endpoint, None, tools_of(tool(False))).run_conversation("ask")
    answer = json.loads(next(m["content"] for m in counted["messages"] if m["role"] == "tool"))
    assert answer["answer"] == "they agree" and answer["tokens"] > 0
    extra = counted["usage"]["total_tokens"] - uncounted["usage"]["total_tokens"]
    assert extra == answer["tokens"]


def test_a_tools_availability_depends_on_the_runs_tool_settings() -> None:
    gated = ToolSpec(
        "gated", {**SCHEMA, "name": "gated"}, None, available=lambda c: None if c.web_corpus else "no corpus"
    )
    assert gated.available(ToolConfig()) == "no corpus"
    assert gated.available(ToolConfig(web_corpus="/srv/corpus")) is None
