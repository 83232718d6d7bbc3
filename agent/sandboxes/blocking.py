"""Blocking work from the event loop, done in threads that are always awaited to their end:
the adapter that makes a blocking sandbox (bwrap, docker) a `Sandbox`, and the one that makes
a blocking tool a `ToolHandler`. Each blocking implementation is wrapped once, where it is
registered, so that nothing above sees two paths.

Why "to the end": a thread cannot be stopped. Were a cancelled caller to go on at once, its
sandbox would be closed (or a local slot handed to the next prompt) while the thread still
creates it, destroys it or writes into it.

Why a thread of its own per call, not the loop's shared executor: a sandbox call may block for
as long as its command's timeout (`sleep 600`). In a pool of a few threads (cores + 4), a few
hung commands took every thread: healthy prompts' calls, the interrupts of timed-out prompts
and the worker's own job fetch all queued behind them (issue 20: 3 of 10 healthy prompts
done in 183 s). A thread per call costs ~0.1 ms to start and never waits for another's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, suppress
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from agent.protocols import JSON, ExecResult, SandboxProcess, ToolContext, ToolHandler

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")


async def to_the_end(work: asyncio.Future[T]) -> T:
    """Await `work` (a thread's result). When the caller is cancelled, even again and again,
    it first waits until the thread is done, then the cancellation goes on."""
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        await outlast(work)
        raise


async def outlast(work: asyncio.Future[Any]) -> None:
    """Wait until `work` is done, whatever cancellations come meanwhile; its outcome is dropped."""
    while not work.done():
        with suppress(asyncio.CancelledError):
            await asyncio.wait([work])
    if not work.cancelled():
        work.exception()  # retrieved: the cancelled caller will not read it


def own_thread(func: Callable[[], T]) -> asyncio.Future[T]:
    """`func()` started now in a thread of its own (see the module's docstring); its outcome
    lands in the future returned, on the running loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():  # the future is never cancelled by its owners: they outlast it
            outcome()

    def run() -> None:
        try:
            result = func()
        except BaseException as exc:  # noqa: BLE001 - not swallowed: handed to the awaiting task
            error = exc
            _call_soon(loop, settle, lambda: future.set_exception(error))
        else:
            _call_soon(loop, settle, lambda: future.set_result(result))

    threading.Thread(target=run, name=f"blocking-{getattr(func, '__name__', 'call')}", daemon=True).start()
    return future


def _call_soon(
    loop: asyncio.AbstractEventLoop, settle: Callable[..., None], outcome: Callable[[], None]
) -> None:
    with suppress(RuntimeError):  # the loop is closed: nobody waits for the outcome any more
        loop.call_soon_threadsafe(settle, outcome)


async def in_thread(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`func(*args, **kwargs)` in a thread of its own, awaited to its end (see `to_the_end`)."""
    return await to_the_end(own_thread(functools.partial(func, *args, **kwargs)))


class BlockingSandbox(Protocol):
    """A sandbox whose calls block (bwrap, docker): made usable from the loop by
    `ThreadedSandbox`. `interrupt` may be called from another thread while calls run."""

    @property
    def workdir(self) -> str: ...

    def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes) -> None: ...

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> AbstractAsyncContextManager[SandboxProcess]:
        """`Sandbox.spawn`, entered and left on the loop: a process outlives any one call, so
        its own work (threads, loop readers) is its own, never a call's thread."""
        ...

    def interrupt(self) -> None:
        """Kill every command running now, so that the calls waiting on them return soon."""
        ...


B = TypeVar("B", bound=BlockingSandbox)


class ThreadedSandbox(Generic[B]):
    """`blocking` as a `Sandbox`: each call runs in a thread. A cancelled call interrupts
    what runs in the sandbox and waits for its thread, so a cancellation stays quick (a
    command would otherwise run on to its timeout) and nothing runs once it has returned."""

    def __init__(self, blocking: B) -> None:
        self.blocking = blocking

    @property
    def workdir(self) -> str:
        return self.blocking.workdir

    async def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult:
        return await self._call(functools.partial(self.blocking.exec, command, timeout=timeout, cwd=cwd))

    async def read_file(self, path: str) -> bytes:
        return await self._call(functools.partial(self.blocking.read_file, path))

    async def write_file(self, path: str, data: bytes) -> None:
        await self._call(functools.partial(self.blocking.write_file, path, data))

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> AbstractAsyncContextManager[SandboxProcess]:
        return self.blocking.spawn(argv, env=env, cwd=cwd)

    async def _call(self, call: Callable[[], T]) -> T:
        work = own_thread(call)
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            if not work.done():
                interrupting = own_thread(self.blocking.interrupt)
                await outlast(interrupting)
                if not interrupting.cancelled() and interrupting.exception() is not None:
                    log.warning("could not interrupt a sandbox: %s", interrupting.exception())
            await outlast(work)
            raise


@asynccontextmanager
async def opened_in_thread(manager: AbstractContextManager[B]) -> AsyncIterator[ThreadedSandbox[B]]:
    """Enter and leave a blocking sandbox manager in threads. A cancellation while it is being
    created waits for the creation, destroys the sandbox, then goes on; leaving the block,
    however it is left, waits until the sandbox is destroyed."""
    entering = own_thread(manager.__enter__)
    try:
        blocking = await to_the_end(entering)
    except asyncio.CancelledError as cancelled:
        if not entering.cancelled() and entering.exception() is None:
            await in_thread(manager.__exit__, type(cancelled), cancelled, cancelled.__traceback__)
        raise
    try:
        yield ThreadedSandbox(blocking)
    except BaseException as exc:
        await in_thread(manager.__exit__, type(exc), exc, exc.__traceback__)
        raise
    await in_thread(manager.__exit__, None, None, None)


BlockingTool = Callable[[Mapping[str, Any]], JSON]


def blocking_tool(tool: BlockingTool) -> ToolHandler:
    """A tool that blocks (a CPU-bound job, a blocking client) as a `ToolHandler`: it runs in a
    thread, awaited to its end. It gets the arguments only: the context belongs to the loop."""

    @functools.wraps(tool)
    async def handler(args: Mapping[str, Any], context: ToolContext) -> JSON:
        return await in_thread(tool, args)

    return handler
