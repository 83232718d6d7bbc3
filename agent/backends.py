"""The run backends by name (`--backend`): where a batch run's prompts run.

Each entry names its factory (a module's `BACKEND`, a `RunBackendFactory`:
`agent.protocols.run_backend`) by dotted path, imported only when that backend is chosen: Ray
takes seconds to import and is an optional extra, and the batch layer that drives a backend
never imports one (the Ray backend, `agent.cluster`, is built on the batch layer, not the
other way). A new backend: its package, with its `BACKEND`, and one entry here.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

from agent.errors import ConfigError

RAY_INSTALL = 'pip install -e ".[ray]"'


@dataclass(frozen=True)
class BackendEntry:
    factory: str  # "module:attribute"
    needs: str | None = None  # a module that must be installed (an optional extra), and its name
    needs_name: str = ""
    install: str = ""  # how to install it


BACKENDS: dict[str, BackendEntry] = {
    "local": BackendEntry("agent.batch.scheduler:BACKEND"),  # worker processes on this machine
    "ray": BackendEntry("agent.cluster.scheduler:BACKEND", "ray", "Ray", RAY_INSTALL),  # actors on a cluster
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


def backend_factory(name: str) -> Any:
    """The factory of backend `name` (imported now), or a ConfigError saying why not."""
    if (why := unavailable_reason(name)) is not None:
        raise ConfigError(why)
    module, _, attribute = BACKENDS[name].factory.partition(":")
    return getattr(importlib.import_module(module), attribute)
