"""The generic OpenAI-compatible server: shapes through the real openai SDK, errors, faults, load."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from agent.servers.completion_stream import completion_chunks
from agent.servers.endpoint_server import EndpointServer
from agent.servers.faults import EndpointFault
from agent.servers.traffic import current_request

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "sim-model",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


TOOL_REPLY = completion(
    {
        "role": "assistant",
        "content": "Let me look at that for you.",
        "reasoning": "The user wants a listing; ls will do.",
        "reasoning_content": "Same thought, other field.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "terminal", "arguments": '{"command": "ls -la /tmp"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "x'},
            },
        ],
    },
    "tool_calls",
)


class Replies:
    """A responder answering with a fixed reply, or raising what a test asks for."""

    def __init__(self, reply: dict[str, Any] = TOOL_REPLY) -> None:
        self.reply = reply
        self.error: BaseException | None = None
        self.bodies: list[dict[str, Any]] = []
        self.contexts: list[Any] = []

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        self.contexts.append(current_request())
        if self.error is not None:
            raise self.error
        return self.reply


@pytest.fixture
def replies() -> Replies:
    return Replies()


@pytest.fixture
def server(replies: Replies) -> Iterator[EndpointServer]:
    with EndpointServer(replies, model_ids=("sim-model", "other-model")) as running:
        yield running


def sync_client(server: EndpointServer, timeout: float = 10.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0, timeout=timeout)


def post_raw(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def test_non_streaming_reply_parses_with_the_sdk_and_keeps_reasoning_fields(server: EndpointServer) -> None:
    with sync_client(server) as client:
        reply = client.chat.completions.create(model="sim-model", messages=MESSAGES)
    message = reply.choices[0].message
    assert message.content == "Let me look at that for you."
    assert reply.choices[0].finish_reason == "tool_calls"
    assert message.model_extra == {
        "reasoning": "The user wants a listing; ls will do.",
        "reasoning_content": "Same thought, other field.",
    }
    assert getattr(message, "reasoning", None) == "The user wants a listing; ls will do."
    calls = [
        (c.id, c.function.name, c.function.arguments)
        for c in message.tool_calls or []
        if c.type == "function"
    ]
    assert calls == [
        ("call_a", "terminal", '{"command": "ls -la /tmp"}'),
        ("call_b", "read_file", '{"path": "x'),
    ]
    assert reply.usage is not None and reply.usage.total_tokens == 18


def accumulate(chunks: list[Any]) -> dict[str, Any]:
    """Rebuild a reply from SDK stream chunks the way an agent would."""
    text: dict[str, str] = {"content": "", "reasoning": "", "reasoning_content": ""}
    calls: dict[int, dict[str, str]] = {}
    finish, usage = None, None
    for chunk in chunks:
        assert chunk.object == "chat.completion.chunk" and chunk.id == "chatcmpl-test"
        if chunk.usage is not None:
            usage = chunk.usage.total_tokens
        for choice in chunk.choices:
            delta = choice.delta
            finish = choice.finish_reason or finish
            text["content"] += delta.content or ""
            for key in ("reasoning", "reasoning_content"):
                text[key] += (delta.model_extra or {}).get(key) or ""
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.id or ""
                slot["name"] += (call.function and call.function.name) or ""
                slot["arguments"] += (call.function and call.function.arguments) or ""
    return {**text, "calls": [calls[i] for i in sorted(calls)], "finish": finish, "usage": usage}


def test_streaming_reply_reassembles_to_the_same_reply(server: EndpointServer) -> None:
    with sync_client(server) as client:
        stream = client.chat.completions.create(
            model="sim-model", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        with stream:
            chunks = list(stream)
    rebuilt = accumulate(chunks)
    assert rebuilt["content"] == "Let me look at that for you."
    assert rebuilt["reasoning"] == "The user wants a listing; ls will do."
    assert rebuilt["reasoning_content"] == "Same thought, other field."
    assert rebuilt["calls"] == [
        {"id": "call_a", "name": "terminal", "arguments": '{"command": "ls -la /tmp"}'},
        {"id": "call_b", "name": "read_file", "arguments": '{"path": "x'},
    ]
    assert rebuilt["finish"] == "tool_calls"
    assert rebuilt["usage"] == 18
    assert chunks[-1].choices == [] and chunks[0].choices[0].delta.role == "assistant"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # really streamed


def test_raw_stream_is_server_sent_events_ending_with_done(server: EndpointServer) -> None:
    body = json.dumps({"model": "sim-model", "messages": MESSAGES, "stream": True}).encode()
    request = urllib.request.Request(
        server.base_url + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        content_type = response.headers["Content-Type"]
        events = response.read().decode().split("\n\n")
    assert content_type.startswith("text/event-stream")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    assert all(event.startswith("data: ") for event in events[:-2])
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert {(chunk["id"], chunk["created"], chunk["model"]) for chunk in chunks} == {
        ("chatcmpl-test", 1_700_000_000, "sim-model")
    }


def test_stream_without_include_usage_has_no_usage_chunk(server: EndpointServer) -> None:
    with (
        sync_client(server) as client,
        client.chat.completions.create(model="sim-model", messages=MESSAGES, stream=True) as stream,
    ):
        chunks = list(stream)
    assert all(chunk.usage is None and chunk.choices for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_async_client_plain_and_streaming(server: EndpointServer) -> None:
    async def run() -> tuple[str | None, str]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
            plain = await client.chat.completions.create(model="sim-model", messages=MESSAGES)
            stream = await client.chat.completions.create(model="sim-model", messages=MESSAGES, stream=True)
            pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
            return plain.choices[0].message.content, "".join(pieces)

    plain, streamed = asyncio.run(run())
    assert plain == streamed == "Let me look at that for you."


def test_chunks_carry_reasoning_details_and_extra_fields_verbatim() -> None:
    details = [{"type": "reasoning.text", "text": "step one", "index": 0}]
    reply = completion({"role": "assistant", "content": None, "reasoning_details": details, "refusal": "no"})
    chunks = list(completion_chunks(reply, include_usage=False))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None, "refusal": "no"}
    assert [c["choices"][0]["delta"] for c in chunks[1:-1]] == [{"reasoning_details": details}]
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}


def test_models_lists_the_configured_ids(server: EndpointServer) -> None:
    with sync_client(server) as client:
        models = client.models.list()
    assert [model.id for model in models.data] == ["sim-model", "other-model"]


def test_bad_json_and_unknown_route_answer_in_openai_error_shape(
    server: EndpointServer, replies: Replies
) -> None:
    status, body = post_raw(server.base_url + "/chat/completions", b"{not json")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, body = post_raw(server.base_url + "/chat/completions", b"[1, 2]")
    assert status == 400 and "JSON object" in body["error"]["message"]
    status, body = post_raw(server.base_url + "/nowhere", b"{}")
    assert status == 404 and set(body["error"]) == {"message", "type", "code"}
    assert replies.bodies == []


def test_http_fault_reaches_the_client_with_status_message_and_headers(
    server: EndpointServer, replies: Replies
) -> None:
    replies.error = EndpointFault(429, "slow down", headers={"Retry-After": "7"})
    with sync_client(server) as client, pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="sim-model", messages=MESSAGES)
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body == {
        "message": "slow down",
        "type": "rate_limit_error",
        "code": "rate_limit_exceeded",
    }


def test_responder_crash_is_a_500_with_its_message_logged_once(
    server: EndpointServer, replies: Replies, caplog: pytest.LogCaptureFixture
) -> None:
    replies.error = RuntimeError("kaboom")
    with (
        caplog.at_level(logging.ERROR),
        sync_client(server) as client,
        pytest.raises(openai.InternalServerError) as caught,
    ):
        client.chat.completions.create(model="sim-model", messages=MESSAGES)
    assert caught.value.status_code == 500 and "RuntimeError: kaboom" in caught.value.message
    assert [r.getMessage() for r in caplog.records if r.name == "agent.servers.endpoint_server"] == [
        "responder failed on /v1/chat/completions"
    ]


def test_unknown_fault_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        EndpointFault(kind="explode")


def test_drop_fault_is_a_connection_error(server: EndpointServer, replies: Replies) -> None:
    replies.error = EndpointFault(kind="drop")
    with sync_client(server) as client, pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="sim-model", messages=MESSAGES)
    replies.error = None  # the server keeps serving after dropping a connection
    with sync_client(server) as client:
        assert client.chat.completions.create(model="sim-model", messages=MESSAGES).id == "chatcmpl-test"


def test_hang_fault_times_the_client_out(server: EndpointServer, replies: Replies) -> None:
    replies.error = EndpointFault(kind="hang")
    with sync_client(server, timeout=0.5) as client, pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="sim-model", messages=MESSAGES)


def test_stop_closes_a_hung_connection(replies: Replies) -> None:
    replies.error = EndpointFault(kind="hang")
    server = EndpointServer(replies)
    server.start()
    outcome: list[BaseException] = []

    def call() -> None:
        with sync_client(server, timeout=120) as client:
            try:
                client.chat.completions.create(model="sim-model", messages=MESSAGES)
            except openai.APIError as error:
                outcome.append(error)

    caller = threading.Thread(target=call)
    caller.start()
    while server.inflight == 0 and caller.is_alive():
        threading.Event().wait(0.01)
    server.stop()  # must not wait for the hung request
    caller.join()
    assert len(outcome) == 1 and isinstance(outcome[0], openai.APIConnectionError)


def test_request_context_gives_the_responder_path_and_headers(
    server: EndpointServer, replies: Replies
) -> None:
    with openai.OpenAI(
        base_url=server.base_url, api_key="k", max_retries=0, default_headers={"X-Title": "batch"}
    ) as client:
        client.chat.completions.create(
            model="sim-model", messages=MESSAGES, extra_body={"provider": {"x": 1}}
        )
    context = replies.contexts[0]
    assert context.path == "/v1/chat/completions"
    assert context.headers["x-title"] == "batch"
    assert replies.bodies[0]["provider"] == {"x": 1}
    assert current_request() is None  # outside a responder


def test_lifecycle_port_errors_and_idempotent_stop(replies: Replies) -> None:
    server = EndpointServer(replies)
    with pytest.raises(RuntimeError, match="not listening"):
        _ = server.base_url
    with server:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        with pytest.raises(RuntimeError, match="already started"):
            server.start()
        clash = EndpointServer(replies, port=server.port)
        with pytest.raises(OSError):
            clash.start()
        clash.stop()
    server.stop()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", server.port)) != 0  # nothing listens any more


def test_servers_with_reuse_port_share_one_port_and_both_answer(replies: Replies) -> None:
    """As the benchmarks run the simulated endpoint in several processes (here, two servers in
    one): the kernel spreads new connections among the listeners."""
    with (
        EndpointServer(replies, reuse_port=True) as first,
        EndpointServer(replies, port=first.port, reuse_port=True) as second,
    ):
        body = json.dumps({"model": "sim-model", "messages": MESSAGES}).encode()
        codes = [post_raw(f"{first.base_url}/chat/completions", body)[0] for _ in range(64)]
        assert codes == [200] * 64
        assert first.requests_total + second.requests_total == 64
        assert first.requests_total > 0 and second.requests_total > 0


def test_serve_forever_runs_in_the_callers_loop(replies: Replies) -> None:
    server = EndpointServer(replies)

    async def run() -> str | None:
        ready = asyncio.Event()
        serving = asyncio.create_task(server.serve_forever(on_ready=ready.set))
        await ready.wait()
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
            reply = await client.chat.completions.create(model="sim-model", messages=MESSAGES)
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        return reply.choices[0].message.content

    assert asyncio.run(run()) == "Let me look at that for you."


def test_hundreds_of_concurrent_keep_alive_requests_all_succeed() -> None:
    count = 320
    arrived = 0
    all_in: asyncio.Event | None = None

    async def barrier_responder(body: dict[str, Any]) -> dict[str, Any]:
        nonlocal arrived, all_in
        all_in = all_in or asyncio.Event()
        arrived += 1
        if arrived >= count:
            all_in.set()
        await all_in.wait()  # every request is in flight at once before any is answered
        return TOOL_REPLY

    async def run(base_url: str) -> list[str]:
        limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=1000)
        async with (
            httpx2.AsyncClient(limits=limits, timeout=120) as http,
            openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0, http_client=http) as client,
        ):
            replies = await asyncio.gather(
                *(client.chat.completions.create(model="sim-model", messages=MESSAGES) for _ in range(count))
            )
        return [reply.id for reply in replies]

    with EndpointServer(barrier_responder) as server:
        ids = asyncio.run(run(server.base_url))
        assert ids == ["chatcmpl-test"] * count
        assert server.requests_total == count
        assert server.peak_inflight == count
        assert server.inflight == 0
