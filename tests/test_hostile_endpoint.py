"""`OpenAIChatModel.complete` against endpoints that misbehave on purpose, through the real
openai SDK and our aiohttp transport: a raw asyncio server on loopback writes exactly the
bytes each case needs (trickled headers or bodies, silence, endless or compressed-bomb
bodies). Every call must end within its deadline and its memory within the reply cap."""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import pytest

from agent.config.agent_config import DEFAULT_MAX_REPLY_BYTES
from agent.errors import ModelAPIError
from agent.llm import client as llm_client
from agent.llm.client import OpenAIChatModel
from agent.protocols import ChatRequest, ModelReply

MiB = 2**20
CHUNK = b"x" * 65536
# What may sit in the loopback socket buffers and aiohttp's read buffer when the client stops
# reading: the server counts those bytes as sent although the client never read them.
IN_FLIGHT_SLACK = 24 * MiB


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_client, "BACKOFF_BASE", 0.01)


class HostileServer:
    """A loopback HTTP/1.1 server: reads each request whole (unless deaf), then lets `respond`
    write; one request per connection."""

    def __init__(
        self, respond: Callable[[HostileServer, asyncio.StreamWriter], Awaitable[None]], *, deaf: bool = False
    ) -> None:
        self.respond = respond
        self.deaf = deaf  # never reads the request
        self.connections = 0
        self.requests = 0
        self.sent = 0
        self._handlers: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> HostileServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            if not self.deaf:
                await self._read_request(reader)
            await self.respond(self, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            return  # the client hung up on us: what these tests want it to do
        finally:
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        self.requests += 1

    async def send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        self.sent += len(data)
        await writer.drain()


def completion(content: str) -> bytes:
    message = {"role": "assistant", "content": content}
    return json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]}).encode()


def head(*lines: str) -> bytes:
    return (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + "".join(f"{x}\r\n" for x in lines) + "\r\n"
    ).encode()


async def call(server: HostileServer, **options: Any) -> ModelReply:
    model = OpenAIChatModel(base_url=server.base_url, api_key="k", model="m", seed=1, **options)
    try:
        return await model.complete(ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[]))
    finally:
        await model.aclose()


def failure(respond: Any, bound: float, **options: Any) -> tuple[ModelAPIError, HostileServer, float]:
    """The call's error, the server, and the seconds it took; fails past `bound` seconds."""

    async def go() -> tuple[ModelAPIError, HostileServer, float]:
        async with HostileServer(respond) as server:
            start = time.monotonic()
            with pytest.raises(ModelAPIError) as caught:
                async with asyncio.timeout(bound):  # today's unbounded read would hang here
                    await call(server, **options)
            return caught.value, server, time.monotonic() - start

    return asyncio.run(go())


async def trickle_body(server: HostileServer, writer: asyncio.StreamWriter) -> None:
    await server.send(writer, head("Content-Length: 1000000"))
    while True:  # one byte a second: every read completes well inside any read timeout
        await server.send(writer, b" ")
        await asyncio.sleep(1)


async def trickle_headers(server: HostileServer, writer: asyncio.StreamWriter) -> None:
    for byte in head("X-Slow: " + "s" * 1000):
        await server.send(writer, bytes([byte]))
        await asyncio.sleep(1)


async def silent(server: HostileServer, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3600)  # accepted and read the request; never answers


@pytest.mark.parametrize("respond", [trickle_body, trickle_headers], ids=["body", "headers"])
@pytest.mark.parametrize("retries", [0, 1])
def test_a_trickling_reply_times_out_at_the_deadline_of_each_attempt(respond: Any, retries: int) -> None:
    """The timeout is a deadline for the whole attempt, not a bound on the gap between bytes."""
    error, server, took = failure(respond, bound=30, timeout=3, max_retries=retries)
    assert error.error_class == "timeout" and error.attempts == retries + 1
    assert server.requests == retries + 1
    assert 3 * (retries + 1) - 0.5 < took < 3 * (retries + 1) + 3


def test_a_server_that_never_answers_times_out() -> None:
    error, server, took = failure(silent, bound=20, timeout=1, max_retries=1)
    assert error.error_class == "timeout" and error.attempts == 2 and server.requests == 2
    assert took < 2 + 3


def rss() -> int:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


async def endless_until_eof(server: HostileServer, writer: asyncio.StreamWriter) -> None:
    await server.send(writer, head("Connection: close"))
    while True:
        await server.send(writer, CHUNK)


async def endless_chunked(server: HostileServer, writer: asyncio.StreamWriter) -> None:
    await server.send(writer, head("Transfer-Encoding: chunked"))
    while True:
        await server.send(writer, b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))


async def gzip_bomb(server: HostileServer, writer: asyncio.StreamWriter) -> None:
    bomb = gzip.compress(b" " * (256 * MiB), compresslevel=9)  # ~250 KB on the wire
    await server.send(writer, head("Content-Encoding: gzip", f"Content-Length: {len(bomb)}") + bomb)


@pytest.mark.parametrize(
    "respond", [endless_until_eof, endless_chunked, gzip_bomb], ids=["until-eof", "chunked", "gzip-bomb"]
)
def test_an_endless_body_is_abandoned_at_the_cap_and_not_retried(respond: Any) -> None:
    before = rss()
    error, server, _ = failure(respond, bound=60, max_reply_bytes=MiB, max_retries=3)
    assert error.error_class == "invalid_response" and error.attempts == 1
    assert f"larger than {MiB} bytes" in str(error) and "--max_reply_bytes" in str(error)
    assert server.requests == 1
    assert server.sent < MiB + IN_FLIGHT_SLACK
    assert rss() - before < 64 * MiB


def test_the_default_cap_bounds_an_endless_body() -> None:
    before = rss()
    error, server, _ = failure(endless_chunked, bound=60)
    assert error.error_class == "invalid_response"
    assert server.sent < DEFAULT_MAX_REPLY_BYTES + IN_FLIGHT_SLACK
    assert rss() - before < DEFAULT_MAX_REPLY_BYTES * 3


def test_a_declared_length_over_the_cap_fails_before_the_body_is_read() -> None:
    async def huge(server: HostileServer, writer: asyncio.StreamWriter) -> None:
        await server.send(writer, head(f"Content-Length: {10 * MiB}"))
        await asyncio.sleep(3600)  # the body never comes: only the header can have failed the call

    error, _, took = failure(huge, bound=20, max_reply_bytes=MiB)
    assert error.error_class == "invalid_response" and took < 5


def reply_of_size(size: int) -> bytes:
    body = completion("")
    return completion("a" * (size - len(body)))


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_a_reply_of_exactly_the_cap_is_read(encoding: str) -> None:
    body = reply_of_size(MiB)
    assert len(body) == MiB

    async def exact(server: HostileServer, writer: asyncio.StreamWriter) -> None:
        wire = body if encoding == "identity" else gzip.compress(body)
        await server.send(
            writer, head(f"Content-Encoding: {encoding}", f"Content-Length: {len(wire)}") + wire
        )

    async def go() -> ModelReply:
        async with HostileServer(exact) as server:
            return await call(server, max_reply_bytes=MiB)

    assert asyncio.run(go()).content == "a" * (MiB - len(completion("")))


def test_one_byte_over_the_cap_is_not() -> None:
    body = reply_of_size(MiB + 1)

    async def over(server: HostileServer, writer: asyncio.StreamWriter) -> None:
        await server.send(writer, head("Connection: close") + body)

    error, _, _ = failure(over, bound=20, max_reply_bytes=MiB)
    assert error.error_class == "invalid_response"


def quick_reply(body: bytes) -> tuple[ModelReply, float]:
    """The reply to a call answered with `body`, and the seconds the call took."""

    async def answer(server: HostileServer, writer: asyncio.StreamWriter) -> None:
        await server.send(writer, head(f"Content-Length: {len(body)}") + body)

    async def go() -> tuple[ModelReply, float]:
        async with HostileServer(answer) as server:
            start = time.monotonic()
            reply = await call(server)
            return reply, time.monotonic() - start

    return asyncio.run(go())


def test_many_unclosed_think_tags_are_parsed_in_linear_time() -> None:
    """Each unclosed opener was matched against the whole rest of the reply: 30,000 of them
    (210 KB) took over a minute of the event loop, which every conversation shares."""
    tags = "<think>" * 30_000 + "<thinking>x" * 30_000
    reply, took = quick_reply(completion(tags))  # a block opening the content, never closed
    assert reply.content == ""
    assert reply.reasoning is not None and reply.reasoning.startswith("<think>" * 29_999)
    assert took < 5
    reply, took = quick_reply(completion("answer " + tags))  # tags inside the answer are its own
    assert (reply.content, reply.reasoning) == ("answer " + tags, None)
    assert took < 5


def test_many_reasoning_details_are_merged_in_linear_time() -> None:
    details = [{"type": "reasoning.text", "text": f"step {i % 10_000}"} for i in range(20_000)]
    message = {"role": "assistant", "content": "done", "reasoning_details": details}
    reply, took = quick_reply(json.dumps({"choices": [{"message": message}]}).encode())
    assert reply.reasoning == "\n\n".join(f"step {i}" for i in range(10_000))  # each copy once
    assert took < 5


def test_a_server_that_never_reads_a_large_request_times_out() -> None:
    """The request's body fills the socket buffers and the send blocks: the deadline covers it."""

    async def go() -> tuple[ModelAPIError, HostileServer, float]:
        async with HostileServer(silent, deaf=True) as server:
            model = OpenAIChatModel(
                base_url=server.base_url, api_key="k", model="m", timeout=1, max_retries=1
            )
            history = [{"role": "user", "content": "x" * (32 * MiB)}]
            start = time.monotonic()
            try:
                with pytest.raises(ModelAPIError) as caught:
                    async with asyncio.timeout(20):
                        await model.complete(ChatRequest(messages=history, tools=[]))
                return caught.value, server, time.monotonic() - start
            finally:
                await model.aclose()

    error, server, took = asyncio.run(go())
    assert error.error_class == "timeout" and error.attempts == 2 and server.connections == 2
    assert took < 2 + 3


def test_endless_headers_are_refused_by_their_limit() -> None:
    async def headers_forever(server: HostileServer, writer: asyncio.StreamWriter) -> None:
        await server.send(writer, b"HTTP/1.1 200 OK\r\n")
        for i in range(1_000_000):
            await server.send(writer, b"X-%d: %s\r\n" % (i, b"h" * 100))

    error, server, _ = failure(headers_forever, bound=30, max_retries=0)
    assert error.error_class == "connection"
    assert server.sent < IN_FLIGHT_SLACK
