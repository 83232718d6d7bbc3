"""`OpenAIChatModel` against the simulated endpoint through the real openai SDK: our retry policy
(the SDK's own retries are off), error classes, Retry-After, timeouts, dropped connections and
reply parsing."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx2
import openai
import pytest

from agent.errors import ModelAPIError
from agent.llm import client as llm_client
from agent.llm.client import OpenAIChatModel, backoff_delay, classify, retry_after
from agent.llm.reply import MAX_TOOL_CALLS
from agent.protocols import ChatRequest, ModelReply, ToolCall
from agent.servers.endpoint_server import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn

HANG = EndpointFault(kind="hang")
# Long enough that a loaded machine never times out a real answer, short enough for a hang.
SHORT_TIMEOUT = 1.0
DROP = EndpointFault(kind="drop")


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep jittered backoff tiny; a server's Retry-After still applies in full."""
    monkeypatch.setattr(llm_client, "BACKOFF_BASE", 0.01)


def ask(endpoint: SimulatedEndpoint, prompt: str, **options: Any) -> ModelReply:
    """One `complete` call for a conversation whose first user message is `prompt`."""

    async def go() -> ModelReply:
        model = OpenAIChatModel(base_url=endpoint.base_url, api_key="k", model="sim-model", seed=1, **options)
        try:
            request = ChatRequest(messages=[{"role": "user", "content": prompt}], tools=[])
            return await model.complete(request)
        finally:
            await model.aclose()

    return asyncio.run(go())


def fails(endpoint: SimulatedEndpoint, prompt: str, **options: Any) -> ModelAPIError:
    with pytest.raises(ModelAPIError) as caught:
        ask(endpoint, prompt, **options)
    return caught.value


def assert_sdk_never_retried(endpoint: SimulatedEndpoint) -> None:
    assert {r.headers["x-stainless-retry-count"] for r in endpoint.requests} == {"0"}


def test_requests_are_json_with_the_key_and_without_sdk_telemetry(sim_endpoint: SimulatedEndpoint) -> None:
    sim_endpoint.script("hello", [Turn(content="hi")])
    assert ask(sim_endpoint, "hello").content == "hi"
    (request,) = sim_endpoint.requests
    headers = {k.lower(): v for k, v in request.headers.items()}
    assert headers["content-type"] == "application/json" and headers["authorization"] == "Bearer k"
    assert request.body["model"] == "sim-model"
    telemetry = ("lang", "package-version", "os", "arch", "runtime", "runtime-version")
    assert not [name for name in telemetry if f"x-stainless-{name}" in headers]


# ---------------------------------------------------------------- transient failures are retried


def test_429_with_retry_after_is_retried_and_succeeds(sim_endpoint: SimulatedEndpoint) -> None:
    limited = EndpointFault(429, "slow down", headers={"Retry-After": "0.1"})
    sim_endpoint.script("busy", [Turn(fault=limited), Turn(content="ok")])
    assert ask(sim_endpoint, "busy", max_retries=3).content == "ok"
    first, second = sim_endpoint.requests
    assert first.body == second.body  # the same request, sent again
    assert sim_endpoint.stats.faults == {"429": 1}
    assert_sdk_never_retried(sim_endpoint)


def test_server_errors_are_retried_until_success(sim_endpoint: SimulatedEndpoint) -> None:
    faults = [Turn(fault=EndpointFault(status)) for status in (500, 502, 503)]
    sim_endpoint.script("flaky", [*faults, Turn(content="recovered")])
    assert ask(sim_endpoint, "flaky", max_retries=3).content == "recovered"
    assert len(sim_endpoint.requests) == 4
    assert sim_endpoint.stats.faults == {"500": 1, "502": 1, "503": 1}
    assert_sdk_never_retried(sim_endpoint)


def test_a_hang_times_out_and_is_retried(sim_endpoint: SimulatedEndpoint) -> None:
    sim_endpoint.script("stuck", [Turn(fault=HANG), Turn(content="awake")])
    assert ask(sim_endpoint, "stuck", timeout=SHORT_TIMEOUT, max_retries=2).content == "awake"
    assert len(sim_endpoint.requests) == 2 and sim_endpoint.stats.faults == {"hang": 1}


def test_a_dropped_connection_is_retried(sim_endpoint: SimulatedEndpoint) -> None:
    sim_endpoint.script("dropped", [Turn(fault=DROP), Turn(fault=DROP), Turn(content="back")])
    assert ask(sim_endpoint, "dropped", max_retries=2).content == "back"
    assert len(sim_endpoint.requests) == 3 and sim_endpoint.stats.faults == {"drop": 2}


@pytest.mark.parametrize(
    ("fault", "error_class", "status"),
    [
        (EndpointFault(503, "down"), "server_error", 503),
        (EndpointFault(429, "limited", headers={"Retry-After": "0.01"}), "rate_limit", 429),
        (HANG, "timeout", None),
        (DROP, "connection", None),
    ],
)
@pytest.mark.parametrize("max_retries", [0, 2])
def test_retries_exhausted_fail_after_max_retries_plus_one_attempts(
    sim_endpoint: SimulatedEndpoint,
    fault: EndpointFault,
    error_class: str,
    status: int | None,
    max_retries: int,
) -> None:
    sim_endpoint.script("dead", [Turn(fault=fault)])  # a trailing fault repeats forever
    timeout = SHORT_TIMEOUT if fault is HANG else 30.0
    error = fails(sim_endpoint, "dead", max_retries=max_retries, timeout=timeout)
    assert (error.error_class, error.status, error.attempts) == (error_class, status, max_retries + 1)
    assert len(sim_endpoint.requests) == max_retries + 1
    assert_sdk_never_retried(sim_endpoint)


# ---------------------------------------------------------------- permanent failures are not


@pytest.mark.parametrize(
    ("status", "error_class"),
    [(400, "bad_request"), (401, "auth"), (403, "auth"), (404, "not_found"), (422, "bad_request")],
)
def test_client_errors_fail_at_once(sim_endpoint: SimulatedEndpoint, status: int, error_class: str) -> None:
    sim_endpoint.script(
        "refused", [Turn(fault=EndpointFault(status, f"refused with {status}")), Turn(content="no")]
    )
    error = fails(sim_endpoint, "refused", max_retries=5)
    assert (error.error_class, error.status, error.attempts) == (error_class, status, 1)
    assert f"refused with {status}" in str(error)
    assert len(sim_endpoint.requests) == 1


# ---------------------------------------------------------------- reply parsing


def test_a_reply_keeps_raw_tool_calls_usage_and_finish_reason(sim_endpoint: SimulatedEndpoint) -> None:
    raw = '{"command": "echo \\"unterminated'
    sim_endpoint.script(
        "calls",
        [Turn(content="calling", reasoning="plan", tool_calls=(("terminal", raw), ("read_file", "")))],
    )
    reply = ask(sim_endpoint, "calls")
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("terminal", raw), ("read_file", "")]
    assert all(isinstance(c, ToolCall) and c.id.startswith("call_") for c in reply.tool_calls)
    assert (reply.content, reply.reasoning, reply.finish_reason) == ("calling", "plan", "tool_calls")
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    assert reply.usage.reasoning_tokens == len("plan") // 4


def test_the_request_carries_tools_max_tokens_and_extra_fields(sim_endpoint: SimulatedEndpoint) -> None:
    tool = {
        "type": "function",
        "function": {"name": "t", "description": "d", "parameters": {"type": "object"}},
    }

    async def go() -> None:
        model = OpenAIChatModel(base_url=sim_endpoint.base_url, api_key="k", model="sim-model")
        request = ChatRequest(
            messages=[{"role": "user", "content": "hi"}],
            tools=[tool],
            max_tokens=77,
            extra_body={"provider": {"sort": "price"}, "reasoning": {"enabled": True, "effort": "low"}},
        )
        try:
            await model.complete(request)
        finally:
            await model.aclose()

    asyncio.run(go())
    (sent,) = sim_endpoint.requests
    assert sent.body["tools"] == [tool] and sent.body["model"] == "sim-model"
    assert (sent.body["max_tokens"], sent.body["provider"], sent.body["reasoning"]) == (
        77,
        {"sort": "price"},
        {"enabled": True, "effort": "low"},
    )
    assert "stream" not in sent.body or sent.body["stream"] is False


def test_tools_win_over_extra_params_and_lose_to_extra_body(sim_endpoint: SimulatedEndpoint) -> None:
    """The schemas are encoded once and spliced in: the precedence of a plain dict update holds."""
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in "abc"]

    async def go() -> None:
        model = OpenAIChatModel(base_url=sim_endpoint.base_url, api_key="k", model="sim-model")
        try:
            for extra_params, extra_body in (({"tools": tools[1:]}, {}), ({}, {"tools": tools[2:]})):
                request = ChatRequest(
                    messages=[{"role": "user", "content": "hi"}],
                    tools=tools[:1],
                    extra_params=extra_params,
                    extra_body=extra_body,
                )
                await model.complete(request)
        finally:
            await model.aclose()

    asyncio.run(go())
    assert [r.body["tools"] for r in sim_endpoint.requests] == [tools[:1], tools[2:]]


# ---------------------------------------------------------------- the policy's pieces


def _status_error(kind: type[openai.APIStatusError], status: int, headers: dict[str, str]) -> Any:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx2.Response(status, headers=headers, request=request, content=json.dumps({}).encode())
    return kind("failed", response=response, body=None)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("0.1", 0.1),
        ("7", 7.0),
        ("3600", llm_client.RETRY_AFTER_CAP),
        ("inf", llm_client.RETRY_AFTER_CAP),
        ("soon", None),
        (None, None),
        ("nan", None),  # a NaN sleep is no sleep: retries would come back to back
        ("-5", None),
    ],
)
def test_retry_after_is_read_and_capped(header: str | None, expected: float | None) -> None:
    headers = {} if header is None else {"Retry-After": header}
    assert retry_after(_status_error(openai.RateLimitError, 429, headers)) == expected


def test_retry_after_is_honoured_first_then_floors_the_jittered_exponential_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(llm_client, "BACKOFF_BASE", 1.0)  # other tests shorten it
    rng = random.Random(3)
    for attempt in range(12):
        ceiling = min(llm_client.BACKOFF_CAP, llm_client.BACKOFF_BASE * 2**attempt)
        delays = [backoff_delay(attempt, None, rng) for _ in range(50)]
        assert all(0 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered, not a fixed schedule
        assert all(0 <= backoff_delay(attempt, 0.0, rng) <= ceiling for _ in range(50))  # no lockstep
        hinted = [backoff_delay(attempt, 0.5, rng) for _ in range(50)]
        assert all(d >= 0.5 for d in hinted) and len(set(hinted)) > 1  # never less than asked
        if attempt < llm_client.HONOURED:  # just what the server asked for, at most a quarter more
            assert all(d <= 0.625 for d in hinted)
        else:  # a throttling that lasts: the backoff grows again
            assert all(d <= max(0.625, ceiling) for d in hinted) and max(hinted) > 0.625
    assert 45.0 <= backoff_delay(0, 45.0, rng) <= 56.25  # longer than our own first backoff


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_status_error(openai.RateLimitError, 429, {}), ("rate_limit", True)),
        (_status_error(openai.InternalServerError, 500, {}), ("server_error", True)),
        (_status_error(openai.APIStatusError, 408, {}), ("server_error", True)),
        (_status_error(openai.AuthenticationError, 401, {}), ("auth", False)),
        (_status_error(openai.PermissionDeniedError, 403, {}), ("auth", False)),
        (_status_error(openai.NotFoundError, 404, {}), ("not_found", False)),
        (_status_error(openai.BadRequestError, 400, {}), ("bad_request", False)),
        (_status_error(openai.APIStatusError, 418, {}), ("bad_request", False)),
        (openai.APITimeoutError(httpx2.Request("POST", "http://127.0.0.1/")), ("timeout", True)),
        (
            openai.APIConnectionError(request=httpx2.Request("POST", "http://127.0.0.1/")),
            ("connection", True),
        ),
        # the transport's own errors, should one surface unwrapped (a body read at the deadline)
        (
            httpx2.ReadTimeout("deadline", request=httpx2.Request("POST", "http://127.0.0.1/")),
            ("timeout", True),
        ),
        (
            httpx2.RemoteProtocolError("cut", request=httpx2.Request("POST", "http://127.0.0.1/")),
            ("connection", True),
        ),
    ],
)
def test_classify(error: Exception, expected: tuple[str, bool]) -> None:
    assert classify(error) == expected


# ---------------------------------------------------------------- malformed replies


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>gateway</html>", "Expecting value"),
        (b'{"choices": []}', "list index out of range"),
        (b'{"choices": [{"message": "text"}]}', "message is not an object"),
        (b'{"object": "error"}', "'choices'"),
    ],
)
def test_a_200_that_is_not_a_completion_is_an_invalid_response_not_retried(body: bytes, reason: str) -> None:
    """Served by a bare aiohttp app on loopback: the simulated endpoint only answers well-formed."""
    from aiohttp import web

    seen: list[web.Request] = []

    async def reply(request: web.Request) -> web.Response:
        seen.append(request)
        assert request.content_type == "application/json"
        assert (await request.json())["messages"][0]["content"] == "hi"
        return web.Response(body=body, content_type="application/json")

    async def go() -> ModelAPIError:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", reply)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        model = OpenAIChatModel(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", model="m")
        try:
            with pytest.raises(ModelAPIError) as caught:
                await model.complete(ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[]))
            return caught.value
        finally:
            await model.aclose()
            await runner.cleanup()

    error = asyncio.run(go())
    assert error.error_class == "invalid_response" and reason in str(error)
    assert len(seen) == 1


def test_a_lone_surrogate_in_a_reply_becomes_u_fffd_so_the_next_request_can_be_sent(
    sim_endpoint: SimulatedEndpoint,
) -> None:
    """`"\\ud800"` is valid JSON but not Unicode: kept, it would fail every later request."""
    sim_endpoint.script(
        "surrogate",
        [
            Turn(
                content="half \ud800 pair \U0001f600",
                tool_calls=(("terminal", '{"command": "echo \udc00"}'),),
            )
        ],
    )
    reply = ask(sim_endpoint, "surrogate")
    assert reply.content == "half \ufffd pair \U0001f600"
    assert reply.tool_calls[0].arguments == '{"command": "echo \ufffd"}'
    reply.content.encode("utf-8")


def test_a_surrogate_sent_as_raw_bytes_is_replaced_too() -> None:
    """`json.loads` of bytes lets a UTF-8-encoded surrogate (ED A0 80) through: no escape to
    see. A real character that also starts with 0xED (U+D55C) is kept."""
    raw = b'{"choices": [{"message": {"content": "a \xed\xa0\x80 b \xed\x95\x9c"}}]}'
    assert llm_client.parse_reply(raw).content == "a \ufffd b \ud55c"


def _completion(message: Any) -> bytes:
    return json.dumps({"choices": [{"message": message}]}).encode()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (_completion({"content": "", "tool_calls": 5}), "tool_calls is not a list"),
        (_completion({"content": "", "tool_calls": "terminal"}), "tool_calls is not a list"),
        (b'{"choices": [{"message": {"content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}]}", "nested"),
        (
            _completion({"content": "", "tool_calls": [{"function": {"name": "t"}}] * (MAX_TOOL_CALLS + 1)}),
            f"{MAX_TOOL_CALLS + 1} tool calls in one reply",
        ),
    ],
    ids=["tool_calls-number", "tool_calls-string", "deep-nesting", "too-many-calls"],
)
def test_a_hostile_completion_is_an_invalid_response(raw: bytes, reason: str) -> None:
    with pytest.raises(ModelAPIError) as caught:
        llm_client.parse_reply(raw)
    assert caught.value.error_class == "invalid_response" and reason in str(caught.value)


def test_the_most_tool_calls_a_reply_may_hold_are_all_kept() -> None:
    calls = [{"id": f"c{i}", "function": {"name": "t", "arguments": "{}"}} for i in range(MAX_TOOL_CALLS)]
    reply = llm_client.parse_reply(_completion({"content": "", "tool_calls": calls}))
    assert [c.id for c in reply.tool_calls] == [f"c{i}" for i in range(MAX_TOOL_CALLS)]


def test_fields_carried_along_are_coerced_to_their_type() -> None:
    """A list id or a number finish reason would break the history and the outputs later."""
    message = {"content": "ok", "tool_calls": [{"id": ["x"], "function": {"name": "t", "arguments": "{}"}}]}
    usage = {
        "prompt_tokens": -1000,
        "completion_tokens": True,
        "completion_tokens_details": {"reasoning_tokens": 7},
    }
    raw = json.dumps({"choices": [{"message": message, "finish_reason": {"x": 1}}], "usage": usage}).encode()
    reply = llm_client.parse_reply(raw)
    assert reply.tool_calls[0].id == "call_0" and reply.finish_reason == "stop"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.reasoning_tokens) == (
        0,
        0,
        7,
    )
