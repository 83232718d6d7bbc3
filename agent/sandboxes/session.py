"""A prompt's sandbox as the loop holds it: opened from a factory, destroyed to the end however
the prompt ends, and the throttle on how many sandboxes a worker creates at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType

from agent.protocols import Sandbox, SandboxFactory, SandboxSpec
from agent.sandboxes.blocking import to_the_end


@asynccontextmanager
async def sandbox_session(factory: SandboxFactory, spec: SandboxSpec) -> AsyncIterator[Sandbox]:
    """The sandbox for `spec`, destroyed when the block is left. A cancellation that lands while
    the sandbox is made still destroys what was made (the factory's managers promise it); one
    that lands while it is destroyed, even a second one, waits until it is gone."""
    manager = factory(spec)
    sandbox = await manager.__aenter__()
    try:
        yield sandbox
    except BaseException as exc:
        await to_the_end(asyncio.ensure_future(manager.__aexit__(type(exc), exc, exc.__traceback__)))
        raise
    await to_the_end(asyncio.ensure_future(manager.__aexit__(None, None, None)))


def throttled(factory: SandboxFactory, starts: int) -> SandboxFactory:
    """`factory` with at most `starts` sandbox creations at once, so that a burst of starts cannot
    starve the machine. Make it on the loop that opens the sandboxes."""
    gate = asyncio.Semaphore(starts)

    def open_sandbox(spec: SandboxSpec) -> AbstractAsyncContextManager[Sandbox]:
        return _Gated(factory(spec), gate)

    return open_sandbox


class _Gated(AbstractAsyncContextManager[Sandbox]):
    """A sandbox manager whose creation waits for a turn at `gate`."""

    def __init__(self, manager: AbstractAsyncContextManager[Sandbox], gate: asyncio.Semaphore) -> None:
        self._manager, self._gate = manager, gate

    async def __aenter__(self) -> Sandbox:
        async with self._gate:
            return await self._manager.__aenter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        return await self._manager.__aexit__(kind, error, trace)
