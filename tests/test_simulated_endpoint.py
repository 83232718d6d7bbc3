"""The simulated endpoint through the real openai SDK: policies, reasoning styles, scripts, faults,
recording, load and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from agent.servers.faults import EndpointFault
from agent.servers.simulated.replies import choose_tool_call
from agent.servers.simulated.server import SimulatedEndpoint, Turn

MakeEndpoint = Callable[..., SimulatedEndpoint]
ROOT = Path(__file__).resolve().parents[1]


def tool(name: str, required: dict[str, Any] | None = None) -> dict[str, Any]:
    properties = required or {}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": properties, "required": list(properties)},
        },
    }


TOOLS = [
    tool("read_file", {"path": {"type": "string"}}),
    tool("terminal", {"command": {"type": "string"}}),
]


def client_for(endpoint: SimulatedEndpoint, **options: Any) -> openai.OpenAI:
    options.setdefault("timeout", 10.0)
    return openai.OpenAI(base_url=endpoint.base_url, api_key="test-key", max_retries=0, **options)


def ask(endpoint: SimulatedEndpoint, messages: list[Any], **params: Any) -> Any:
    with client_for(endpoint) as client:
        return (
            client.chat.completions.create(model="sim-model", messages=messages, **params).choices[0].message
        )


def ask_streaming(endpoint: SimulatedEndpoint, messages: list[Any], **params: Any) -> dict[str, Any]:
    """The streamed reply, reassembled: content, each reasoning field, tool calls, finish reason."""
    out: dict[str, Any] = {
        "content": "",
        "reasoning": "",
        "reasoning_content": "",
        "details": [],
        "calls": {},
    }
    with client_for(endpoint) as client:
        stream = client.chat.completions.create(model="sim-model", messages=messages, stream=True, **params)
        with stream:
            for chunk in stream:
                for choice in chunk.choices:
                    extra = choice.delta.model_extra or {}
                    out["content"] += choice.delta.content or ""
                    out["reasoning"] += extra.get("reasoning") or ""
                    out["reasoning_content"] += extra.get("reasoning_content") or ""
                    out["details"] += extra.get("reasoning_details") or []
                    out["finish"] = choice.finish_reason or out.get("finish")
                    for call in choice.delta.tool_calls or []:
                        name, args = out["calls"].get(call.index, ("", ""))
                        function = call.function
                        out["calls"][call.index] = (
                            name + ((function and function.name) or ""),
                            args + ((function and function.arguments) or ""),
                        )
    out["calls"] = [out["calls"][i] for i in sorted(out["calls"])]
    return out


def as_history(message: Any) -> dict[str, Any]:
    return message.model_dump(exclude_none=True)


# ---------------------------------------------------------------- default policy


def test_default_policy_calls_terminal_then_answers_with_the_result(sim_endpoint: SimulatedEndpoint) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
    ]
    first = ask(sim_endpoint, messages, tools=TOOLS)
    (call,) = first.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "terminal",
        {"command": "echo hello"},
    )
    assert first.reasoning and "terminal" in first.reasoning
    messages += [as_history(first), {"role": "tool", "tool_call_id": call.id, "content": "hello-from-tool"}]
    final = ask(sim_endpoint, messages, tools=TOOLS)
    assert final.tool_calls is None and "hello-from-tool" in final.content
    assert "hello-from-tool" in final.reasoning


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        (
            ["search_files", "write_file", "read_file"],
            ("write_file", {"path": "hello.txt", "content": "hello\n"}),
        ),
        (["search_files", "read_file"], ("read_file", {"path": "hello.txt"})),
        (["web_search", "search_files"], ("search_files", {"pattern": "hello"})),
    ],
)
def test_preferred_tools_get_valid_arguments(
    offered: list[str], expected: tuple[str, dict[str, Any]]
) -> None:
    schemas = {
        "write_file": {"path": {"type": "string"}, "content": {"type": "string"}},
        "read_file": {"path": {"type": "string"}},
        "search_files": {"pattern": {"type": "string"}},
        "web_search": {"query": {"type": "string"}},
    }
    assert choose_tool_call([tool(name, schemas[name]) for name in offered]) == expected


def test_unknown_tool_gets_arguments_from_its_required_schema() -> None:
    schema = tool("rl_train", {"steps": {"type": "integer"}, "mode": {"enum": ["fast", "slow"]}})
    schema["function"]["parameters"]["properties"]["optional"] = {"type": "string"}
    assert choose_tool_call([schema, tool("other")]) == ("rl_train", {"steps": 1, "mode": "fast"})


def test_answer_policy_answers_at_once(make_sim_endpoint: MakeEndpoint) -> None:
    endpoint = make_sim_endpoint(policy="answer")
    message = ask(endpoint, [{"role": "user", "content": "what is 2+2"}], tools=TOOLS)
    assert message.tool_calls is None and "what is 2+2" in message.content


def test_without_tools_the_default_policy_answers(sim_endpoint: SimulatedEndpoint) -> None:
    assert ask(sim_endpoint, [{"role": "user", "content": "hello"}]).tool_calls is None


# ---------------------------------------------------------------- reasoning styles


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "style", ["field", "reasoning_content", "reasoning_details", "think_inline", "scratchpad", "none"]
)
def test_each_reasoning_style_reaches_the_client(
    make_sim_endpoint: MakeEndpoint, style: str, stream: bool
) -> None:
    endpoint = make_sim_endpoint(reasoning=style, policy="answer")
    messages = [{"role": "user", "content": "explain"}]
    if stream:
        got = ask_streaming(endpoint, messages)
        content = got["content"]
        reasoning, reasoning_content = got["reasoning"] or None, got["reasoning_content"] or None
        details = got["details"] or None
    else:
        message = ask(endpoint, messages)
        content = message.content
        reasoning, reasoning_content, details = (
            getattr(message, key, None) for key in ("reasoning", "reasoning_content", "reasoning_details")
        )
    answer = "Here is my answer to: explain"
    expect_inline = {"think_inline": "<think>\n", "scratchpad": "<REASONING_SCRATCHPAD>\n"}.get(style)
    if expect_inline:
        assert content.startswith(expect_inline) and content.endswith(answer)
    else:
        assert content == answer
    assert (reasoning is not None) == (style == "field")
    assert (reasoning_content is not None) == (style == "reasoning_content")
    assert (details is not None) == (style == "reasoning_details")
    if details is not None:
        assert details[0]["type"] == "reasoning.text" and details[0]["text"]


# ---------------------------------------------------------------- scripts


def test_scripted_turns_follow_each_conversation_and_survive_retries(sim_endpoint: SimulatedEndpoint) -> None:
    sim_endpoint.script(
        "task A", [Turn(tool_calls=(("terminal", '{"command": "ls"}'),)), Turn(content="A done")]
    )
    sim_endpoint.script(
        "task B", [Turn(content="B only", reasoning="short", reasoning_field="reasoning_content")]
    )
    a1 = ask(sim_endpoint, [{"role": "user", "content": "task A"}])
    b1 = ask(sim_endpoint, [{"role": "user", "content": "task B"}])
    a1_retry = ask(sim_endpoint, [{"role": "user", "content": "task A"}])
    assert (
        a1.tool_calls[0].function.arguments
        == a1_retry.tool_calls[0].function.arguments
        == '{"command": "ls"}'
    )
    assert (b1.content, b1.model_extra) == ("B only", {"reasoning_content": "short"})
    history = [{"role": "user", "content": "task A"}, as_history(a1)]
    history.append({"role": "tool", "tool_call_id": a1.tool_calls[0].id, "content": "x"})
    assert ask(sim_endpoint, history).content == "A done"
    history += [{"role": "assistant", "content": "A done"}, {"role": "user", "content": "more?"}]
    assert "Here is my answer" in ask(sim_endpoint, history).content  # script exhausted: policy answers


@pytest.mark.parametrize("stream", [False, True])
def test_malformed_tool_arguments_pass_through_verbatim(
    sim_endpoint: SimulatedEndpoint, stream: bool
) -> None:
    broken = '{"command": "echo \\"unterminated'
    sim_endpoint.script(
        "break it", [Turn(tool_calls=(("terminal", broken), ("nope", "")), finish_reason="length")]
    )
    messages = [{"role": "user", "content": "break it"}]
    if stream:
        got = ask_streaming(sim_endpoint, messages)
        calls, finish = got["calls"], got["finish"]
    else:
        with client_for(sim_endpoint) as client:
            choice = client.chat.completions.create(model="m", messages=messages).choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls]
        finish = choice.finish_reason
    assert calls == [("terminal", broken), ("nope", "")]
    assert finish == "length"


def test_scripted_faults_are_consumed_and_trailing_faults_persist(sim_endpoint: SimulatedEndpoint) -> None:
    sim_endpoint.script("flaky", [Turn(fault=EndpointFault(503, "busy")), Turn(content="recovered")])
    sim_endpoint.script("dead", [Turn(fault=EndpointFault(500, "down"))])
    with pytest.raises(openai.InternalServerError) as caught:
        ask(sim_endpoint, [{"role": "user", "content": "flaky"}])
    assert caught.value.status_code == 503
    assert ask(sim_endpoint, [{"role": "user", "content": "flaky"}]).content == "recovered"
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            ask(sim_endpoint, [{"role": "user", "content": "dead"}])
    assert sim_endpoint.stats.faults == {"503": 1, "500": 2}


def test_default_script_and_clear(sim_endpoint: SimulatedEndpoint) -> None:
    sim_endpoint.set_default_script([Turn(content="from the default script")])
    sim_endpoint.script("own", [Turn(content="own script")])
    assert ask(sim_endpoint, [{"role": "user", "content": "anything"}]).content == "from the default script"
    assert ask(sim_endpoint, [{"role": "user", "content": "own"}]).content == "own script"
    sim_endpoint.clear()
    assert ask(sim_endpoint, [{"role": "user", "content": "own"}]).content == "Here is my answer to: own"


def test_turn_rejects_an_unknown_reasoning_field() -> None:
    with pytest.raises(ValueError, match="reasoning_field"):
        Turn(reasoning="x", reasoning_field="thoughts")


@pytest.mark.parametrize(
    "options",
    [
        {"policy": "chaos"},
        {"reasoning": "telepathy"},
        {"rate_429": 0.7, "rate_5xx": 0.5},
        {"rate_drop": -0.1},
    ],
)
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SimulatedEndpoint(**options)


# ---------------------------------------------------------------- injected faults


@pytest.mark.parametrize(("retry_after", "header"), [(1.0, "1"), (2.5, "2.5"), (None, None)])
def test_rate_limit_carries_retry_after(
    make_sim_endpoint: MakeEndpoint, retry_after: Any, header: Any
) -> None:
    endpoint = make_sim_endpoint(rate_429=1.0, retry_after=retry_after)
    with pytest.raises(openai.RateLimitError) as caught:
        ask(endpoint, [{"role": "user", "content": "hi"}])
    assert caught.value.response.headers.get("retry-after") == header
    assert endpoint.stats.faults == {"429": 1}


def test_server_errors_are_5xx(make_sim_endpoint: MakeEndpoint) -> None:
    endpoint = make_sim_endpoint(rate_5xx=1.0)
    statuses = set()
    for _ in range(12):
        with pytest.raises(openai.InternalServerError) as caught:
            ask(endpoint, [{"role": "user", "content": "hi"}])
        statuses.add(caught.value.status_code)
    assert statuses <= {500, 502, 503} and len(statuses) > 1
    assert sum(endpoint.stats.faults.values()) == 12


def test_hang_times_out_and_drop_is_a_connection_error(make_sim_endpoint: MakeEndpoint) -> None:
    hanging = make_sim_endpoint(rate_hang=1.0)
    with client_for(hanging, timeout=0.5) as client, pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    dropping = make_sim_endpoint(rate_drop=1.0)
    with pytest.raises(openai.APIConnectionError) as caught:
        ask(dropping, [{"role": "user", "content": "hi"}])
    assert not isinstance(caught.value, openai.APITimeoutError)
    assert (hanging.stats.faults, dropping.stats.faults) == ({"hang": 1}, {"drop": 1})


def outcomes(endpoint: SimulatedEndpoint, count: int) -> list[str]:
    found = []
    with client_for(endpoint) as client:
        for _ in range(count):
            try:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
                found.append("ok")
            except openai.APIStatusError as error:
                found.append(str(error.status_code))
    return found


def test_fault_injection_is_seeded(make_sim_endpoint: MakeEndpoint) -> None:
    first = outcomes(make_sim_endpoint(seed=7, rate_429=0.3, rate_5xx=0.3), 30)
    again = outcomes(make_sim_endpoint(seed=7, rate_429=0.3, rate_5xx=0.3), 30)
    other = outcomes(make_sim_endpoint(seed=8, rate_429=0.3, rate_5xx=0.3), 30)
    assert first == again != other
    assert {"ok", "429"} <= set(first) and len(set(first)) > 2


# ---------------------------------------------------------------- recording and usage


def test_requests_are_recorded_with_body_and_headers(sim_endpoint: SimulatedEndpoint) -> None:
    with client_for(sim_endpoint, default_headers={"X-Title": "batch-runner"}) as client:
        client.chat.completions.create(
            model="some/model",
            messages=[{"role": "user", "content": "record me"}],
            tools=TOOLS,
            max_tokens=50,
            extra_body={"provider": {"order": ["a", "b"]}, "reasoning": {"enabled": True, "effort": "high"}},
        )
    (recorded,) = sim_endpoint.requests
    assert recorded.path == "/v1/chat/completions"
    assert recorded.body["messages"] == [{"role": "user", "content": "record me"}]
    assert recorded.body["tools"] == TOOLS and recorded.body["max_tokens"] == 50
    assert recorded.body["provider"] == {"order": ["a", "b"]}
    assert recorded.body["reasoning"] == {"enabled": True, "effort": "high"}
    assert recorded.headers["x-title"] == "batch-runner"
    assert recorded.headers["authorization"] == "Bearer test-key"
    sim_endpoint.clear_requests()
    assert sim_endpoint.requests == []


def test_recording_can_be_bounded_or_off(make_sim_endpoint: MakeEndpoint) -> None:
    bounded, off = make_sim_endpoint(max_recorded=2), make_sim_endpoint(record=False)
    for endpoint in (bounded, off):
        for prompt in ("one", "two", "three"):
            ask(endpoint, [{"role": "user", "content": prompt}])
    assert [r.body["messages"][0]["content"] for r in bounded.requests] == ["two", "three"]
    assert off.requests == [] and off.stats.requests_total == 3


def test_usage_is_consistent_and_grows_with_the_request(sim_endpoint: SimulatedEndpoint) -> None:
    with client_for(sim_endpoint) as client:
        short = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        long = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi " * 400}])
    for reply in (short, long):
        usage = reply.usage
        assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
        details = usage.completion_tokens_details
        assert details is not None and 0 < (details.reasoning_tokens or 0) <= usage.completion_tokens
    assert long.usage and short.usage and long.usage.prompt_tokens > short.usage.prompt_tokens + 250


# ---------------------------------------------------------------- load and CLI


def test_three_hundred_concurrent_requests_all_succeed(make_sim_endpoint: MakeEndpoint) -> None:
    # Sending 300 requests through one SDK client takes it ~0.3-0.5 s on 2 cores; a latency well
    # above that keeps every request in flight at once without making the test depend on speed.
    endpoint = make_sim_endpoint(latency=1.5)
    count = 300
    assert endpoint.stats.first_request_at is None
    before = time.monotonic()

    async def run() -> list[str]:
        limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=1000)
        async with (
            httpx2.AsyncClient(limits=limits, timeout=120) as http,
            openai.AsyncOpenAI(
                base_url=endpoint.base_url, api_key="k", max_retries=0, http_client=http
            ) as client,
        ):
            replies = await asyncio.gather(
                *(
                    client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"p{i}"}])
                    for i in range(count)
                )
            )
        return [reply.choices[0].message.content or "" for reply in replies]

    answers = asyncio.run(run())
    assert answers == [f"Here is my answer to: p{i}" for i in range(count)]
    stats = endpoint.stats
    assert stats.requests_total == count and stats.inflight == 0
    assert stats.peak_inflight >= count
    assert stats.first_request_at is not None and before < stats.first_request_at < time.monotonic() - 1.5


def test_cli_prints_its_url_serves_and_stops_on_sigterm() -> None:
    command = [
        sys.executable,
        "-m",
        "agent.servers.simulated",
        "--port=0",
        "--latency=0.05",
        "--policy=answer",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().rstrip("\n")
            match = re.fullmatch(r"listening on (http://127\.0\.0\.1:(\d+)/v1)", line)
            assert match and int(match.group(2)) > 0, line
            with openai.OpenAI(base_url=match.group(1), api_key="k", max_retries=0, timeout=10) as client:
                reply = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "cli"}]
                )
            assert reply.choices[0].message.content == "Here is my answer to: cli"
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr


def test_cli_reports_a_bad_option_in_one_line() -> None:
    command = [
        sys.executable,
        "-m",
        "agent.servers.simulated",
        "--port=0",
        "--rate_429=0.9",
        "--rate_5xx=0.9",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "simulated endpoint: fault rates must be >= 0 and sum to at most 1"
    ]
