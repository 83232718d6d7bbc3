"""A process's side of the shared limit (`agent.llm.hub_sync.HubSync`): closing it ends its
exchange task whatever that task was doing when the close came."""

from __future__ import annotations

import asyncio

import pytest

from agent.llm.hub_sync import HubSync
from agent.llm.shared_limit import Grant, Report


class _Limiter:
    inflight = 0
    waiting = 0
    permits_wanted = 0

    def __init__(self) -> None:
        self.grants: list[Grant] = []

    def apply(self, grant: Grant) -> None:
        self.grants.append(grant)


class _Link:
    async def exchange(self, report: Report) -> Grant:
        return Grant(share=1)


@pytest.mark.parametrize("steps", range(6))
def test_a_close_that_comes_as_an_exchange_is_asked_for_still_ends_the_task(steps: int) -> None:
    """A worker's last answer asks for an exchange (`need`) just as the worker closes the sync.
    Before, on Python 3.11 the exchange task's `wait_for` returned the set event instead of
    raising the cancel, the task went on waiting for a need that never came, and `aclose`
    waited forever: the worker never exited and the run hung (--max_cost, one in five runs)."""

    async def scenario() -> None:
        limiter = _Limiter()
        sync = HubSync(limiter, _Link(), "worker-0")
        sync.need()
        while not limiter.grants:  # the task is running and waits for the next need
            await asyncio.sleep(0.01)
        sync.succeeded(10, 0.001)  # an answer to report: the task waits PERIOD at most
        await asyncio.sleep(0.06)  # past MIN_GAP: it waits on the event now
        sync.need()
        for _ in range(steps):  # the close lands at each point of the wake-up
            await asyncio.sleep(0)
        closing = asyncio.ensure_future(sync.aclose())
        done, _ = await asyncio.wait({closing}, timeout=5.0)
        assert done == {closing}, "aclose still waits for the exchange task"

    asyncio.run(scenario())
