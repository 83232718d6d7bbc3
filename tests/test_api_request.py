"""What the agent sends: the request body per endpoint dialect as the simulated endpoint recorded it
(max_tokens, reasoning control, provider routing, said-once warnings), tools offered, and the
ephemeral system prompt and prefill messages used at call time but never saved."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from agent.config.agent_config import AgentConfig
from agent.llm import request as api_request
from agent.llm.request import BASE_SYSTEM_PROMPT, build_request
from agent.sandboxes import SandboxOptions
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from run_agent import AIAgent

PROVIDERS = {
    "providers_allowed": ["anthropic", "google"],
    "providers_ignored": ["sketchy"],
    "providers_order": ["google", "anthropic"],
    "provider_sort": "throughput",
}
PROVIDER_BLOCK = {
    "only": ["anthropic", "google"],
    "ignore": ["sketchy"],
    "order": ["google", "anthropic"],
    "sort": "throughput",
}
ROUTING_KEYS = {"reasoning", "provider", "reasoning_effort"}


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a new process would: nothing said yet."""
    monkeypatch.setattr(api_request, "_said", set())


def agent_for(endpoint: SimulatedEndpoint, tmp_path: Path, **options: Any) -> AIAgent:
    options.setdefault("enabled_toolsets", ["terminal", "file"])
    return AIAgent(
        base_url=endpoint.base_url,
        api_key="k",
        model="sim-model",
        max_retries=0,
        sandbox=SandboxOptions(backend="local", root=str(tmp_path / "sandboxes")),
        trajectory_dir=str(tmp_path),
        **options,
    )


def tool_then_answer(endpoint: SimulatedEndpoint, prompt: str) -> None:
    endpoint.script(
        prompt, [Turn(tool_calls=(("terminal", '{"command": "echo hi"}'),)), Turn(content="done")]
    )


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


# ---------------------------------------------------------------- dialects


@pytest.mark.parametrize(
    ("reasoning", "sent"),
    [
        ({"enabled": True, "effort": "high"}, {"enabled": True, "effort": "high"}),
        ({"effort": "none"}, {"effort": "none"}),
    ],
)
def test_openrouter_gets_reasoning_and_provider_routing_in_the_body(
    sim_endpoint: SimulatedEndpoint,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    reasoning: dict[str, Any],
    sent: dict[str, Any],
) -> None:
    tool_then_answer(sim_endpoint, "route me")
    agent = agent_for(
        sim_endpoint,
        tmp_path,
        api_dialect="openrouter",
        max_tokens=123,
        reasoning_config=reasoning,
        **PROVIDERS,
    )
    assert agent.run_conversation("route me")["completed"]
    bodies = [r.body for r in sim_endpoint.requests]
    assert len(bodies) == 2
    for body in bodies:
        assert (body["max_tokens"], body["reasoning"], body["provider"]) == (123, sent, PROVIDER_BLOCK)
        assert "reasoning_effort" not in body
    assert warnings_about(caplog, "") == []  # everything was honoured


def test_openrouter_without_flags_sends_neither(sim_endpoint: SimulatedEndpoint, tmp_path: Path) -> None:
    agent_for(sim_endpoint, tmp_path, api_dialect="openrouter").run_conversation("plain")
    for request in sim_endpoint.requests:
        assert ROUTING_KEYS.isdisjoint(request.body) and "max_tokens" not in request.body


def test_a_generic_endpoint_gets_neither_and_the_log_says_so_once(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    tool_then_answer(sim_endpoint, "one")
    tool_then_answer(sim_endpoint, "two")
    agent = agent_for(
        sim_endpoint,
        tmp_path,
        max_tokens=50,
        reasoning_config={"enabled": True, "effort": "low"},
        **PROVIDERS,
    )
    assert agent.config.dialect == "generic"
    assert agent.run_conversation("one")["completed"] and agent.run_conversation("two")["completed"]
    assert len(sim_endpoint.requests) == 4
    for request in sim_endpoint.requests:
        assert ROUTING_KEYS.isdisjoint(request.body)
        assert request.body["max_tokens"] == 50  # understood everywhere
    (provider,) = warnings_about(caplog, "provider routing")
    (reasoning,) = warnings_about(caplog, "reasoning flags")
    assert sim_endpoint.base_url in provider and sim_endpoint.base_url in reasoning


def test_the_openai_dialect_gets_reasoning_effort(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    tool_then_answer(sim_endpoint, "effort")
    agent = agent_for(
        sim_endpoint,
        tmp_path,
        api_dialect="openai",
        max_tokens=64,
        reasoning_config={"enabled": True, "effort": "low"},
        providers_allowed=["anthropic"],
    )
    assert agent.run_conversation("effort")["completed"]
    for request in sim_endpoint.requests:
        body = request.body
        assert body["reasoning_effort"] == "low"
        assert "reasoning" not in body and "provider" not in body
        assert body.get("max_completion_tokens", body.get("max_tokens")) == 64
    assert len(warnings_about(caplog, "provider routing")) == 1
    assert warnings_about(caplog, "reasoning flags") == []


@pytest.mark.parametrize(
    ("base_url", "dialect"),
    [
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("https://api.openai.com/v1", "openai"),
        ("http://127.0.0.1:8000/v1", "generic"),
        ("https://api.together.xyz/v1", "generic"),
    ],
)
def test_the_dialect_follows_the_base_url_unless_given(base_url: str, dialect: str) -> None:
    assert AgentConfig(base_url=base_url).dialect == dialect
    assert AgentConfig(base_url=base_url, api_dialect="openrouter").dialect == "openrouter"


# ---------------------------------------------------------------- messages and tools


def test_system_prompt_prefill_and_history_as_sent() -> None:
    prefill = (
        {"role": "user", "content": "example question"},
        {"role": "assistant", "content": "example answer"},
    )
    config = AgentConfig(ephemeral_system_prompt="Be terse.", prefill_messages=prefill)
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "reasoning": "private thoughts",
            "reasoning_details": [{"type": "reasoning.encrypted", "data": "sig"}],
            "truncated": True,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "terminal", "content": "out"},
    ]
    request = build_request(config, history, tools=[])
    system, *rest = request.messages
    assert system == {"role": "system", "content": BASE_SYSTEM_PROMPT + "\n\nBe terse."}
    assert rest[:2] == list(prefill)
    assert rest[2] == history[0]
    assert rest[3] == {
        "role": "assistant",
        "content": "",
        "tool_calls": history[1]["tool_calls"],
        "reasoning_details": [{"type": "reasoning.encrypted", "data": "sig"}],  # signed reasoning goes back
    }
    assert rest[4] == history[2]
    assert history[1]["reasoning"] == "private thoughts"  # the history itself is untouched
    assert build_request(AgentConfig(), history, tools=[]).messages[0]["content"] == BASE_SYSTEM_PROMPT


def test_ephemeral_prompt_and_prefill_are_sent_every_call_but_never_saved(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    ephemeral = "EPHEMERAL-INSTRUCTION: answer in French"
    prefill = [
        {"role": "user", "content": "PREFILL-QUESTION"},
        {"role": "assistant", "content": "PREFILL-ANSWER"},
    ]
    # The endpoint keys scripts by the first user message and counts the assistant messages it
    # was sent, so from its side this conversation starts with the prefill pair.
    sim_endpoint.script(
        "PREFILL-QUESTION",
        [
            Turn(content="(the prefill answer's slot)"),
            Turn(tool_calls=(("terminal", '{"command": "echo hi"}'),)),
            Turn(content="done"),
        ],
    )
    agent = agent_for(
        sim_endpoint,
        tmp_path,
        ephemeral_system_prompt=ephemeral,
        prefill_messages=prefill,
        save_trajectories=True,
    )
    result = agent.run_conversation("the real question")
    assert result["completed"] and len(sim_endpoint.requests) == 2
    for request in sim_endpoint.requests:
        system, first, second, user, *_ = request.body["messages"]
        assert system["role"] == "system" and ephemeral in system["content"]
        assert [first, second] == prefill
        assert user == {"role": "user", "content": "the real question"}

    assert result["messages"][0] == {"role": "user", "content": "the real question"}
    text = (tmp_path / "trajectory_samples.jsonl").read_text(encoding="utf-8")
    (line,) = [json.loads(row) for row in text.splitlines()]
    for secret_part in (ephemeral, "PREFILL-QUESTION", "PREFILL-ANSWER", BASE_SYSTEM_PROMPT[:40]):
        assert secret_part not in text
        assert secret_part not in json.dumps(result["messages"])
    assert [t["from"] for t in line["conversations"]] == ["system", "human", "gpt", "tool", "gpt"]
    assert line["conversations"][0]["value"].startswith("You are a function calling AI model.")
    assert line["conversations"][1]["value"] == "the real question"


def test_the_enabled_toolsets_usable_tools_are_offered(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    agent_for(sim_endpoint, tmp_path, enabled_toolsets=["terminal", "file"]).run_conversation("tools")
    offered = sorted(t["function"]["name"] for t in sim_endpoint.requests[0].body["tools"])
    assert offered == ["patch", "process", "read_file", "search_files", "terminal", "write_file"]
    sim_endpoint.clear_requests()

    agent = agent_for(
        sim_endpoint, tmp_path, enabled_toolsets=["terminal", "file"], disabled_toolsets=["file"]
    )
    agent.run_conversation("fewer tools")
    assert [t["function"]["name"] for t in sim_endpoint.requests[0].body["tools"]] == ["process", "terminal"]
    assert agent.tools.toolsets_used == ["terminal"]
