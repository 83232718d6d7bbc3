"""Sandbox backends and the choice between them.

A backend is a package (`local`, `bwrap`, `docker`) exposing `BACKEND`, a `SandboxBackend`
(agent/protocols.py): how to open a sandbox, why it cannot run here, how to reap what dead
processes left, and optionally a pool for a whole run. Backends are imported lazily, by name,
so that a missing optional dependency of one backend (the docker SDK) never breaks another.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from agent.errors import ConfigError, SandboxUnavailable
from agent.protocols import Sandbox, SandboxBackend, SandboxFactory, SandboxOptions, SandboxSpec
from agent.sandboxes.blocking import to_the_end
from agent.sandboxes.session import sandbox_session, throttled

__all__ = [
    "BACKENDS",
    "SandboxOptions",
    "available_backends",
    "backend",
    "reap_stale",
    "resolve_backend",
    "sandbox_factory",
    "sandbox_pool",
    "sandbox_session",
    "throttled",
    "to_the_end",
    "unavailable_reason",
]

BACKENDS = ("local", "bwrap", "docker")  # each is the package agent.sandboxes.<name>
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


def backend(name: str) -> SandboxBackend:
    """The backend called `name` (one of BACKENDS), its package imported now if not yet."""
    if name not in BACKENDS:
        raise ConfigError(f"unknown sandbox backend {name!r}; use one of {', '.join(BACKENDS)}")
    found: SandboxBackend = importlib.import_module(f"agent.sandboxes.{name}").BACKEND
    return found


def unavailable_reason(options: SandboxOptions) -> str | None:
    """Why `options.backend` cannot run here (with how to fix it), or None when it can."""
    try:
        chosen = backend(options.backend)
    except ImportError as exc:
        return f"backend module failed to import: {exc}"
    return chosen.unavailable_reason(options)


def available_backends(options: SandboxOptions | None = None) -> dict[str, str | None]:
    """Every backend with its unavailability reason (None = works on this machine)."""
    base = options or SandboxOptions()
    return {
        name: unavailable_reason(SandboxOptions(**{**base.__dict__, "backend": name})) for name in BACKENDS
    }


def reap_stale(options: SandboxOptions) -> list[str]:
    """Remove what dead processes (kill -9, the OOM killer) left behind for this backend:
    directories for local/bwrap, containers for docker. Returns what was removed."""
    return backend(options.backend).reap_stale(options)


def sandbox_factory(options: SandboxOptions) -> SandboxFactory:
    """A factory for `options.backend`; raises SandboxUnavailable when it cannot run here."""
    reason = unavailable_reason(options)
    if reason is not None:
        raise SandboxUnavailable(f"sandbox backend '{options.backend}' is unavailable: {reason}")
    chosen = backend(options.backend)

    def open_sandbox(spec: SandboxSpec) -> AbstractAsyncContextManager[Sandbox]:
        return chosen.open(spec, options)

    return open_sandbox


@asynccontextmanager
async def sandbox_pool(options: SandboxOptions, run_name: str) -> AsyncIterator[SandboxFactory]:
    """A factory for all of a run's sandboxes in this process, valid inside the block: the
    backend's own pool when it has one, else `sandbox_factory`'s fresh sandbox per prompt."""
    factory = sandbox_factory(options)  # raises SandboxUnavailable before anything is made
    pool = backend(options.backend).pool
    if pool is None:
        yield factory
        return
    async with pool(options, run_name) as pooled:
        yield pooled
