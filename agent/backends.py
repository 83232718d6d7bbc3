"""The run backends by name (`--backend`): where a batch run's prompts run.

Each entry names its factory (a module's `BACKEND`, a `RunBackendFactory`:
`agent.protocols.run_backend`) by dotted path, imported only when that backend is chosen: Ray
takes seconds to import and is an optional extra, and the batch layer that drives a backend
never imports one (the Ray backend, `agent.cluster`, is built on the batch layer, not the
other way). A new backend: its package, with its `BACKEND`, and one entry here.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from agent.errors import ConfigError

RAY_INSTALL = 'pip install -e ".[ray]"'
DEFAULT_BACKEND = "local"  # `--backend`'s default (RunConfig.backend)


@dataclass(frozen=True)
class BackendEntry:
    factory: str  # "module:attribute"
    needs: str | None = None  # a module that must be installed (an optional extra), and its name
    needs_name: str = ""
    install: str = ""  # how to install it
    # "module:function", a context manager to hold around the whole run: it starts what the
    # backend's workers start from now, so that their imports run beside the run's checks
    warm: str = ""
    # "module:function" starting the same before the command line is read; "module:function"
    # stopping it (an atexit handler, for a command that turns out not to run the backend)
    early: str = ""
    stop: str = ""
    # "module:function" given the run's configuration before anything is written or shown: a
    # ConfigError for what the backend cannot run with (a cluster address nothing answers at)
    check: str = ""


BACKENDS: dict[str, BackendEntry] = {
    # worker processes on this machine, forked by a fork server that imports their modules once
    "local": BackendEntry(
        "agent.batch.scheduler:BACKEND",
        warm="agent.batch.fork_server:warm_workers",
        early="agent.batch.fork_server:start_server",
        stop="agent.batch.fork_server:stop_server",
    ),
    "ray": BackendEntry(  # actors on a cluster
        "agent.cluster.scheduler:BACKEND", "ray", "Ray", RAY_INSTALL, check="agent.cluster:check_address"
    ),
}
RUN_BACKENDS = tuple(BACKENDS)


def _importable(module: str) -> bool:
    """Whether `module` can be imported, without importing it (Ray takes seconds to import)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def unavailable_reason(name: str) -> str | None:
    """Why `--backend=name` cannot run here (None when it can): unknown, or its extra missing."""
    entry = BACKENDS.get(name)
    if entry is None:
        return f"--backend={name}: unknown backend; use one of {', '.join(BACKENDS)}"
    if entry.needs is not None and not _importable(entry.needs):
        return f"--backend={name} needs {entry.needs_name}, which is not installed: {entry.install}"
    return None


def warm_up(name: str) -> AbstractContextManager[Any]:
    """Hold around a run on backend `name`: its workers' start-up begins at once (nothing for a
    backend without `warm`, or a name `backend_factory` will refuse)."""
    entry = BACKENDS.get(name)
    if entry is None or not entry.warm or unavailable_reason(name) is not None:
        return nullcontext()
    module, _, attribute = entry.warm.partition(":")
    made: AbstractContextManager[Any] = getattr(importlib.import_module(module), attribute)()
    return made


def backend_factory(name: str) -> Any:
    """The factory of backend `name` (imported now), or a ConfigError saying why not."""
    if (why := unavailable_reason(name)) is not None:
        raise ConfigError(why)
    module, _, attribute = BACKENDS[name].factory.partition(":")
    return getattr(importlib.import_module(module), attribute)


def check_backend(name: str, config: Any) -> None:
    """Backend `name`'s own check of the run's configuration (`BackendEntry.check`), if any."""
    entry = BACKENDS.get(name)
    if entry is not None and entry.check:
        module, _, attribute = entry.check.partition(":")
        getattr(importlib.import_module(module), attribute)(config)


# Flags after which the command runs no prompt (nothing to warm up): --help, the distributions,
# a rescore of stored entries.
NO_RUN_FLAGS = ("help", "h", "list_distributions", "rescore")


def warm_up_early(argv: Sequence[str]) -> None:
    """Before the command line is read (its flag table imports the whole configuration): when
    `argv` plainly asks for a run (a --dataset_file, none of `NO_RUN_FLAGS`) on a backend
    with an `early` start, start it now, so that the workers' imports (the SDK: the first
    request waits for them) begin a quarter second sooner. `warm_up` then finds it started and
    stops it at the end of the run; a command that ends before (a flag error) stops it on
    its way out (atexit). Anything unusual (a flag spelled in a way not read here) only
    forgoes the early start."""
    names, backend = set(), DEFAULT_BACKEND
    for i, token in enumerate(argv):
        if not token.startswith("-"):
            continue
        flag, equals, value = token.partition("=")
        name = flag.lstrip("-").replace("-", "_")
        names.add(name)
        if name == "backend":
            backend = value if equals else (argv[i + 1] if i + 1 < len(argv) else "")
    entry = BACKENDS.get(backend)
    if entry is None or not entry.early or "dataset_file" not in names or names & set(NO_RUN_FLAGS):
        return
    atexit.register(_attribute(entry.stop))
    _attribute(entry.early)()


def _attribute(path: str) -> Any:
    """The attribute a "module:attribute" path names (its module imported now)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
