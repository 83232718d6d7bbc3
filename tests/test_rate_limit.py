"""`AdaptiveLimiter` on a real event loop: AIMD (one cut per window of 429s, additive recovery),
Retry-After pauses, errors that must not cut, in-flight, rpm and tpm limits; and the limiter in
front of the real client against the simulated endpoint. Assertions are on limits, counters
and the order of events, never on elapsed time."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest

from agent.llm import client as llm_client
from agent.llm.client import OpenAIChatModel
from agent.llm.rate_limit import AdaptiveLimiter
from agent.protocols import ChatRequest
from agent.servers.endpoint_server import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


async def ticks(n: int = 20) -> None:
    """Let every ready task run (a few loop passes and a tiny sleep)."""
    for _ in range(n):
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)


async def once(limiter: AdaptiveLimiter, outcome: str, retry_after: float | None = None) -> None:
    async with limiter.slot() as ticket:
        if outcome == "ok":
            ticket.succeeded(10)
        else:
            ticket.failed(outcome, retry_after)


# ---------------------------------------------------------------- AIMD


def test_a_burst_of_429s_cuts_the_limit_once_per_window() -> None:
    async def go() -> None:
        limiter = AdaptiveLimiter(16)
        async with AsyncExitStack() as stack:
            tickets = [await stack.enter_async_context(limiter.slot()) for _ in range(16)]
            assert limiter.inflight == 16
            for ticket in tickets[:8]:  # not yet a burst: 8 in a row stay under the share
                ticket.failed("rate_limit", None)
            assert (limiter.limit, limiter.generation) == (16, 0)
            for ticket in tickets[8:]:  # all sent under the old limit: one cut, not eight
                ticket.failed("rate_limit", None)
            assert (limiter.limit, limiter.generation, limiter.stats.rate_limited) == (8, 1, 16)
        await once(limiter, "rate_limit")  # sent under the new limit, still a burst: cut again
        assert (limiter.limit, limiter.generation) == (4, 2)
        for _ in range(4):
            await once(limiter, "rate_limit")
        assert limiter.limit == limiter.minimum == 1
        assert (limiter.stats.run_limit_low, limiter.stats.run_limit_high) == (1, 16)
        assert limiter.stats.rate_limited == 21


def test_a_storm_of_429s_cuts_the_limit_while_a_backlog_keeps_every_slot_busy() -> None:
    async def go() -> None:
        limiter = AdaptiveLimiter(64)
        in_flight: deque[tuple[Any, Any]] = deque()

        async def send() -> None:
            context = limiter.slot()
            in_flight.append((context, await context.__aenter__()))

        for _ in range(64):
            await send()
        for _ in range(64):  # every call answered 429, oldest first; its slot refilled at once
            context, ticket = in_flight.popleft()
            ticket.failed("rate_limit", None)
            await context.__aexit__(None, None, None)
            if limiter.generation:
                break
            await send()  # the 32 calls sent last are always still in flight
        assert (limiter.generation, limiter.limit) == (1, 32)
        assert limiter.stats.rate_limited < 32  # cut within the first window of answers
        while in_flight:
            await in_flight.popleft()[0].__aexit__(None, None, None)

    run(go)


def test_scattered_429s_do_not_cut_the_limit() -> None:
    async def go() -> None:
        limiter = AdaptiveLimiter(8)
        for i in range(200):  # one call in five throttled, evenly: not a burst
            await once(limiter, "rate_limit" if i % 5 == 0 else "ok", retry_after=60.0)
        assert (limiter.limit, limiter.generation, limiter.stats.rate_limited) == (8, 0, 40)
        assert limiter.paused_until == 0.0  # each throttled call waits on its own, not everyone

    run(go)

    run(go)


def test_successes_grow_the_limit_back_additively_up_to_the_maximum() -> None:
    async def go() -> None:
        limiter = AdaptiveLimiter(4, initial=2)
        await once(limiter, "ok")
        assert 2 < limiter.limit < 3  # additive: no jump
        grown = 1
        while int(limiter.limit) < 3:
            await once(limiter, "ok")
            grown += 1
        assert grown in (2, 3)  # about one slot per window of `limit` successes
        for _ in range(100):
            await once(limiter, "ok")
        assert limiter.limit == 4  # capped
        assert (limiter.stats.run_limit_low, limiter.stats.run_limit_high) == (2, 4)

    run(go)


@pytest.mark.parametrize(
    ("error_class", "counter"),
    [("server_error", "server_errors"), ("timeout", "timeouts"), ("connection", "connection_errors")],
)
def test_server_errors_and_timeouts_never_cut_or_pause(error_class: str, counter: str) -> None:
    async def go() -> None:
        limiter = AdaptiveLimiter(8)
        for _ in range(5):
            await once(limiter, error_class, retry_after=60.0)
        assert (limiter.limit, limiter.generation, limiter.paused_until) == (8, 0, 0.0)
        assert getattr(limiter.stats, counter) == 5 and limiter.stats.rate_limited == 0
        await asyncio.wait_for(once(limiter, "ok"), 5)  # no pause: the next call starts

    run(go)


# ---------------------------------------------------------------- waiting for a slot


def test_retry_after_pauses_new_calls_until_it_has_passed() -> None:
    async def go() -> None:
        limiter = AdaptiveLimiter(4)
        for _ in range(9):  # a burst
            await once(limiter, "rate_limit", retry_after=60.0)
        blocked = asyncio.create_task(once(limiter, "ok"))
        await ticks()
        assert not blocked.done() and limiter.inflight == 0
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        assert limiter.inflight == 0  # a cancelled waiter holds nothing

        short = AdaptiveLimiter(4)
        for _ in range(9):
            await once(short, "rate_limit", retry_after=0.05)
        resume = short.paused_until
        async with short.slot():
            started = time.monotonic()
        assert started >= resume  # it waited for the pause, however long that took

    run(go)


def test_the_in_flight_limit_makes_calls_wait_for_a_free_slot() -> None:
    async def go() -> None:
        limiter = AdaptiveLimiter(2)
        events: list[str] = []
        release = {name: asyncio.Event() for name in "abc"}

        async def call(name: str) -> None:
            async with limiter.slot():
                events.append(f"{name} started")
                await release[name].wait()
            events.append(f"{name} done")

        tasks = [asyncio.create_task(call(name)) for name in "abc"]
        await ticks()
        assert events == ["a started", "b started"] and limiter.inflight == 2
        release["b"].set()
        await ticks()
        assert events == ["a started", "b started", "b done", "c started"]
        release["a"].set()
        release["c"].set()
        await asyncio.gather(*tasks)
        assert limiter.stats.peak_inflight == 2 and limiter.stats.calls == 3

    run(go)


def test_rpm_paces_the_starts_of_calls() -> None:
    async def go() -> None:
        paced = AdaptiveLimiter(10, rpm=1)  # one start a minute
        await once(paced, "ok")
        second = asyncio.create_task(once(paced, "ok"))
        await ticks()
        assert not second.done() and paced.stats.calls == 1
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second

        unpaced = AdaptiveLimiter(10)
        for _ in range(3):
            await asyncio.wait_for(once(unpaced, "ok"), 5)
        assert unpaced.stats.calls == 3

    run(go)


def test_tpm_reserves_tokens_for_the_calls_in_flight() -> None:
    # Counting answers alone let every call in flight start before the first answer came.
    async def go() -> None:
        limiter = AdaptiveLimiter(10, tpm=100)
        async with limiter.slot() as first:
            second = asyncio.create_task(once(limiter, "ok"))  # answers with 10 tokens
            await ticks()
            assert not second.done()  # nothing measured yet: one call at a time
            first.succeeded(20)
        await asyncio.wait_for(second, 5)
        # 30 answered, 15 a call (the moving mean of 20 and 10): room for four more, together
        async with AsyncExitStack() as stack:
            for _ in range(4):
                await asyncio.wait_for(stack.enter_async_context(limiter.slot()), 5)
            fifth = asyncio.create_task(once(limiter, "ok"))
            await ticks()
            assert not fifth.done() and limiter.stats.calls == 6
            fifth.cancel()
            with pytest.raises(asyncio.CancelledError):
                await fifth

    run(go)


# ---------------------------------------------------------------- in front of the real client


def _complete_all(endpoint: SimulatedEndpoint, limiter_options: dict[str, Any], prompts: list[str]) -> Any:
    async def go() -> AdaptiveLimiter:
        limiter = AdaptiveLimiter(**limiter_options)
        model = OpenAIChatModel(
            base_url=endpoint.base_url, api_key="k", model="sim-model", limiter=limiter, max_retries=3, seed=0
        )
        try:
            requests = [ChatRequest(messages=[{"role": "user", "content": p}], tools=[]) for p in prompts]
            replies = await asyncio.gather(*(model.complete(r) for r in requests))
        finally:
            await model.aclose()
        assert [r.content for r in replies] == [f"answer {p}" for p in prompts]
        return limiter

    return asyncio.run(go())


def test_the_client_reports_a_429_burst_and_the_limiter_cuts_once(
    sim_endpoint: SimulatedEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llm_client, "BACKOFF_BASE", 0.01)
    prompts = [f"p{i}" for i in range(10)]
    limited = EndpointFault(429, "slow down", headers={"Retry-After": "0.05"})
    for prompt in prompts:
        sim_endpoint.script(prompt, [Turn(fault=limited), Turn(content=f"answer {prompt}")])
    limiter = _complete_all(sim_endpoint, {"maximum": 10}, prompts)
    assert (limiter.stats.rate_limited, limiter.stats.calls, limiter.generation) == (10, 20, 1)
    assert limiter.stats.run_limit_low == 5  # ten 429s from one window: halved once
    assert limiter.limit > 5  # and the ten successful retries grew it back a little
    assert len(sim_endpoint.requests) == 20 and sim_endpoint.stats.faults == {"429": 10}


def test_the_limiter_bounds_the_calls_in_flight(sim_endpoint: SimulatedEndpoint) -> None:
    prompts = [f"q{i}" for i in range(6)]
    for prompt in prompts:
        sim_endpoint.script(prompt, [Turn(content=f"answer {prompt}", delay=0.05)])
    limiter = _complete_all(sim_endpoint, {"maximum": 2}, prompts)
    assert limiter.stats.peak_inflight == 2 and limiter.stats.calls == 6
    assert sim_endpoint.stats.peak_inflight <= 2


def test_scattered_429s_among_many_calls_in_flight_do_not_cut_the_limit(
    make_sim_endpoint: Callable[..., SimulatedEndpoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 429 is answered at once while a success takes the endpoint's latency, so the first
    # answers of a full window are the throttled ones, in a row. One call in five throttled
    # is not a burst: the calls still in flight were accepted.
    monkeypatch.setattr(llm_client, "BACKOFF_BASE", 0.01)
    endpoint = make_sim_endpoint(latency=0.3, rate_429=0.2, retry_after=0.05, seed=7, policy="answer")
    prompts = [f"r{i}" for i in range(64)]

    async def go() -> AdaptiveLimiter:
        limiter = AdaptiveLimiter(64)
        model = OpenAIChatModel(
            base_url=endpoint.base_url, api_key="k", model="sim-model", limiter=limiter, max_retries=8, seed=0
        )
        try:
            requests = [ChatRequest(messages=[{"role": "user", "content": p}], tools=[]) for p in prompts]
            await asyncio.gather(*(model.complete(r) for r in requests))
        finally:
            await model.aclose()
        return limiter

    limiter = asyncio.run(go())
    assert limiter.stats.rate_limited >= 9  # enough of them to have looked like a burst
    assert (limiter.generation, limiter.paused_until) == (0, 0.0)
    assert limiter.stats.calls == 64 + limiter.stats.rate_limited
