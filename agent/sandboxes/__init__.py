"""Sandbox backends and the choice between them.

Each backend module (`local`, `bwrap`, `docker`) exposes:

    def open_sandbox(spec: SandboxSpec, options: SandboxOptions) -> AbstractContextManager[Sandbox]
    def unavailable_reason(options: SandboxOptions) -> str | None   # None when usable here

and may expose `open_pool(options, run_name) -> AbstractContextManager[SandboxFactory]`, a
factory for a whole run in one process that reuses what it can between prompts.

Backends are imported lazily so that a missing optional dependency of one backend never
breaks another.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
    suppress,
)
from types import ModuleType
from typing import TypeVar

from agent.errors import ConfigError, SandboxUnavailable
from agent.protocols import Sandbox, SandboxFactory, SandboxSpec
from agent.sandboxes.options import SandboxOptions

T = TypeVar("T")

__all__ = [
    "BACKENDS",
    "SandboxOptions",
    "available_backends",
    "reap_stale",
    "resolve_backend",
    "sandbox_factory",
    "sandbox_pool",
    "sandbox_session",
    "to_the_end",
    "unavailable_reason",
]

BACKENDS = ("local", "bwrap", "docker")
UNSUPPORTED = {
    "singularity": "Singularity/Apptainer is not supported yet (not installable on these machines)",
    "apptainer": "Singularity/Apptainer is not supported yet (not installable on these machines)",
    "modal": "Modal is not supported yet (a cloud service this tool cannot reach or test)",
    "daytona": "Daytona is not supported yet (a cloud service this tool cannot reach or test)",
    "ssh": "ssh is not supported yet",
}


def resolve_backend(flag: str | None) -> str:
    """The backend named by --sandbox, else TERMINAL_ENV, else local; unknown names are a ConfigError."""
    name = (flag or os.environ.get("TERMINAL_ENV") or "local").strip().lower()
    if name in UNSUPPORTED:
        raise ConfigError(f"--sandbox={name}: {UNSUPPORTED[name]}; use one of {', '.join(BACKENDS)}")
    if name not in BACKENDS:
        raise ConfigError(f"--sandbox={name}: unknown backend; use one of {', '.join(BACKENDS)}")
    return name


def _module(backend: str) -> ModuleType:
    return importlib.import_module(f"agent.sandboxes.{backend}.sandbox")


def unavailable_reason(options: SandboxOptions) -> str | None:
    """Why `options.backend` cannot run here (with how to fix it), or None when it can."""
    try:
        module = _module(options.backend)
    except ImportError as exc:
        return f"backend module failed to import: {exc}"
    reason: str | None = module.unavailable_reason(options)
    return reason


def available_backends(options: SandboxOptions | None = None) -> dict[str, str | None]:
    """Every backend with its unavailability reason (None = works on this machine)."""
    base = options or SandboxOptions()
    return {
        name: unavailable_reason(SandboxOptions(**{**base.__dict__, "backend": name})) for name in BACKENDS
    }


def reap_stale(options: SandboxOptions) -> list[str]:
    """Remove what dead processes (kill -9, the OOM killer) left behind for this backend:
    directories for local/bwrap, containers for docker. Returns what was removed."""
    if options.backend == "docker":
        from agent.sandboxes.docker.engine import engine_client
        from agent.sandboxes.docker.lifecycle import reap_stale as reap_containers

        return reap_containers(engine_client())
    removed: list[str] = _module(options.backend).reap_stale(options.root)
    return removed


def sandbox_factory(options: SandboxOptions) -> SandboxFactory:
    """A factory for `options.backend`; raises SandboxUnavailable when it cannot run here."""
    reason = unavailable_reason(options)
    if reason is not None:
        raise SandboxUnavailable(f"sandbox backend '{options.backend}' is unavailable: {reason}")
    module = _module(options.backend)

    def open_sandbox(spec: SandboxSpec) -> AbstractContextManager[Sandbox]:
        cm: AbstractContextManager[Sandbox] = module.open_sandbox(spec, options)
        return cm

    return open_sandbox


@contextmanager
def sandbox_pool(options: SandboxOptions, run_name: str) -> Iterator[SandboxFactory]:
    """A factory for all of a run's sandboxes in this process, valid inside the block: the
    backend's own pool when it has one, else `sandbox_factory`'s fresh sandbox per prompt."""
    factory = sandbox_factory(options)  # raises SandboxUnavailable before anything is made
    open_pool = getattr(_module(options.backend), "open_pool", None)
    if open_pool is None:
        yield factory
        return
    with open_pool(options, run_name) as pooled:
        yield pooled


@asynccontextmanager
async def sandbox_session(factory: SandboxFactory, spec: SandboxSpec) -> AsyncIterator[Sandbox]:
    """Open a sandbox from async code: on the event loop when the factory's manager supports
    `async with`, else creation and destruction run in threads; a cancellation that lands
    mid-creation still destroys what was created."""
    manager = factory(spec)
    if isinstance(manager, AbstractAsyncContextManager):
        async with _shielded_exit(manager) as sandbox:
            yield sandbox
        return
    entering = asyncio.ensure_future(asyncio.to_thread(manager.__enter__))
    try:
        sandbox = await to_the_end(entering)
    except asyncio.CancelledError:
        if not entering.cancelled() and entering.exception() is None:
            await to_the_end(asyncio.ensure_future(asyncio.to_thread(manager.__exit__, None, None, None)))
        raise
    try:
        yield sandbox
    finally:
        # A later cancellation must not abandon a half-destroyed sandbox.
        await to_the_end(asyncio.ensure_future(asyncio.to_thread(manager.__exit__, None, None, None)))


async def to_the_end(work: asyncio.Future[T]) -> T:
    """Await `work` (a thread's result). A thread cannot be stopped: when the caller is
    cancelled, even again and again, it first waits until the thread is done, then the
    cancellation goes on; so a sandbox is never closed, or handed on, while a thread still
    creates it, destroys it or writes into it."""
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            with suppress(asyncio.CancelledError):
                await asyncio.wait([work])
        if not work.cancelled():
            work.exception()  # retrieved: the cancelled caller will not read it
        raise


@asynccontextmanager
async def _shielded_exit(manager: AbstractAsyncContextManager[Sandbox]) -> AsyncIterator[Sandbox]:
    sandbox = await manager.__aenter__()
    try:
        yield sandbox
    except BaseException as exc:
        # Shielded: a second cancellation must not abandon a half-destroyed sandbox.
        await asyncio.shield(manager.__aexit__(type(exc), exc, exc.__traceback__))
        raise
    await asyncio.shield(manager.__aexit__(None, None, None))
