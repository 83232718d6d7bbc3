"""Sandbox backends and the choice between them.

A backend is a package (`local`, `bwrap`, `docker`) exposing `BACKEND`, a `SandboxBackend`
(agent/protocols/sandbox.py): how to open a sandbox, why it cannot run here, how to reap what
dead processes left, optionally a pool for a whole run, which dataset rows it can run, and what
a run's start and each worker process need of it. Backends are imported lazily, by name, so
that a missing optional dependency of one backend (the docker SDK) never breaks another; one
kept elsewhere joins the registry with `register`.
`auto` (the default) names the strongest backend usable here (see `choice`): the CLI edge
resolves it once with `resolve_backend`; a SandboxOptions still saying `auto` is resolved
where it is used.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from agent.errors import ConfigError, SandboxUnavailable
from agent.protocols import RowProblem, Sandbox, SandboxBackend, SandboxFactory, SandboxOptions, SandboxSpec
from agent.sandboxes.blocking import to_the_end
from agent.sandboxes.choice import AUTO, probe
from agent.sandboxes.session import sandbox_session, throttled

__all__ = [
    "AUTO",
    "BACKENDS",
    "SandboxOptions",
    "available_backends",
    "backend",
    "names",
    "prepare_worker",
    "reap_stale",
    "register",
    "resolve_backend",
    "row_problem",
    "run_options",
    "sandbox_factory",
    "sandbox_pool",
    "sandbox_session",
    "throttled",
    "to_the_end",
    "unavailable_reason",
]

log = logging.getLogger(__name__)

BACKENDS = ("local", "bwrap", "docker")  # the built-in ones: each is the package agent.sandboxes.<name>
_modules = {name: f"agent.sandboxes.{name}" for name in BACKENDS}  # the registry: name -> module
_chosen: dict[str | None, str] = {}  # auto's choice in this process, by sandbox root
UNSUPPORTED = {
    "singularity": "Singularity/Apptainer is not supported yet (not installable on these machines)",
    "apptainer": "Singularity/Apptainer is not supported yet (not installable on these machines)",
    "modal": "Modal is not supported yet (a cloud service this tool cannot reach or test)",
    "daytona": "Daytona is not supported yet (a cloud service this tool cannot reach or test)",
    "ssh": "ssh is not supported yet",
}


def resolve_backend(flag: str | None, root: str | None = None) -> str:
    """The concrete backend for --sandbox: the one it names; for `auto` (or none) TERMINAL_ENV's
    when set, else the strongest usable here (`strongest`). Unknown names are a ConfigError."""
    name = (flag or AUTO).strip().lower()
    if name == AUTO:
        name = (os.environ.get("TERMINAL_ENV") or AUTO).strip().lower()
    if name in UNSUPPORTED:
        raise ConfigError(f"--sandbox={name}: {UNSUPPORTED[name]}; use one of {', '.join(names())}")
    if name != AUTO and name not in _modules:
        raise ConfigError(f"--sandbox={name}: unknown backend; use one of {AUTO}, {', '.join(names())}")
    if name == "local":
        _say_local_tracking()
    return strongest(root) if name == AUTO else name


def register(name: str, module: str) -> None:
    """Make `module`'s BACKEND (a SandboxBackend) the backend `name` (--sandbox=name). A run's
    worker processes need it too: register it at the import of the program's main module,
    which each spawned worker imports again."""
    if name == AUTO or name in UNSUPPORTED or _modules.get(name, module) != module:
        raise ValueError(f"sandbox backend name {name!r} is taken")
    _modules[name] = module


def names() -> tuple[str, ...]:
    """Every registered backend's name: the built-in ones first."""
    return tuple(_modules)


def strongest(root: str | None = None) -> str:
    """bwrap when it is usable here (installed, and a probe sandbox works), else local; decided
    once per process and said once in the log, with why."""
    if root not in _chosen:
        options = SandboxOptions(backend="bwrap", root=root)
        why_not = unavailable_reason(options) or probe(backend("bwrap"), options)
        _chosen[root] = "bwrap" if why_not is None else "local"
        if why_not is None:
            chosen = "sandbox backend: bwrap (the default, auto: the strongest usable here)"
            _say_once("auto", chosen, logging.INFO)  # information, not a warning: all is as it should be
        else:
            _say_once("auto", f"sandbox backend: local (the default, auto: bwrap is not usable: {why_not})")
            _say_local_tracking()
    return _chosen[root]


_said: set[str] = set()
_unsaid: list[tuple[int, str]] = []  # said when the choice is first used, not while flags are checked


def _say_once(topic: str, line: str, level: int = logging.WARNING) -> None:
    if topic not in _said:
        _said.add(topic)
        _unsaid.append((level, line))


def _say_choice() -> None:
    """Log how the backend was chosen, once, when a run first uses it (after every check of
    its flags and dataset passed: an invalid command line stays one line)."""
    while _unsaid:
        level, line = _unsaid.pop(0)
        log.log(level, "%s", line)


def _say_local_tracking() -> None:
    """How local sandboxes track processes here: a warning when no cgroup does."""
    from agent.sandboxes.local import tracking  # imported with the backend it describes

    _say_once("local", tracking.describe(), logging.INFO if tracking.tracked() else logging.WARNING)


def _say_memory(options: SandboxOptions) -> None:
    """How local and bwrap sandboxes' memory is bounded here: a warning when no cgroup does."""
    if options.backend not in ("local", "bwrap"):
        return  # docker: the engine's own limit
    from agent.sandboxes.host import memory_limits

    weak = options.memory_mb > 0 and memory_limits.hierarchy() is None
    _say_once("memory", memory_limits.describe(options.memory_mb), logging.WARNING if weak else logging.INFO)


def concrete(options: SandboxOptions) -> SandboxOptions:
    """`options` with `auto` resolved to the backend it means here."""
    if options.backend != AUTO:
        return options
    return dataclasses.replace(options, backend=strongest(options.root))


def backend(name: str) -> SandboxBackend:
    """The backend called `name` (registered, or `auto`), its module imported now if not yet."""
    if name == AUTO:
        name = strongest()
    if name not in _modules:
        raise ConfigError(f"unknown sandbox backend {name!r}; use one of {', '.join(names())}")
    found: SandboxBackend = importlib.import_module(_modules[name]).BACKEND
    return found


def unavailable_reason(options: SandboxOptions) -> str | None:
    """Why `options.backend` cannot run here (with how to fix it), or None when it can."""
    options = concrete(options)
    try:
        chosen = backend(options.backend)
    except ImportError as exc:
        return f"backend module failed to import: {exc}"
    return chosen.unavailable_reason(options)


def available_backends(options: SandboxOptions | None = None) -> dict[str, str | None]:
    """Every backend with its unavailability reason (None = works on this machine)."""
    base = options or SandboxOptions()
    return {
        name: unavailable_reason(SandboxOptions(**{**base.__dict__, "backend": name})) for name in names()
    }


def row_problem(name: str, image: str | None, cwd: str | None) -> RowProblem | None:
    """What is wrong with a dataset row's `image` and `cwd` for the backend `name`; None: nothing."""
    try:
        chosen = backend(name)
    except ImportError:  # not checkable: why the backend cannot run is the run's start-up line
        return None
    return chosen.row_problem(image, cwd)


def run_options(options: SandboxOptions, *, default_image_used: bool) -> SandboxOptions:
    """`options` for a run whose rows are known (`default_image_used`: some row names no image),
    to be checked with `unavailable_reason` next."""
    options = concrete(options)
    try:
        chosen = backend(options.backend)
    except ImportError:  # said by `unavailable_reason`, next
        return options
    return chosen.run_options(options, default_image_used=default_image_used)


def prepare_worker(options: SandboxOptions) -> None:
    """Set up this worker process for `options.backend`, before its event loop and sandboxes."""
    options = concrete(options)
    backend(options.backend).prepare_worker(options)


def reap_stale(options: SandboxOptions) -> list[str]:
    """Remove what dead processes (kill -9, the OOM killer) left behind for this backend:
    directories for local/bwrap, containers for docker. Returns what was removed."""
    options = concrete(options)
    _say_memory(options)
    _say_choice()
    return backend(options.backend).reap_stale(options)


def sandbox_factory(options: SandboxOptions) -> SandboxFactory:
    """A factory for `options.backend`; raises SandboxUnavailable when it cannot run here."""
    options = concrete(options)
    _say_memory(options)
    _say_choice()
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
    options = concrete(options)
    factory = sandbox_factory(options)  # raises SandboxUnavailable before anything is made
    pool = backend(options.backend).pool
    if pool is None:
        yield factory
        return
    async with pool(options, run_name) as pooled:
        yield pooled
