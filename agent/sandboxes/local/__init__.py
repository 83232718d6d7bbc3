"""The `local` backend: a private host directory per prompt, commands run by host bash (see
`sandbox`), slots reused within a run's pool (see `slots`)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from agent.protocols import Sandbox, SandboxBackend, SandboxOptions, SandboxPool, SandboxSpec
from agent.sandboxes.local import sandbox, slots, tracking


class LocalBackend:
    def unavailable_reason(self, options: SandboxOptions) -> str | None:
        return sandbox.unavailable_reason(options)

    def open(self, spec: SandboxSpec, options: SandboxOptions) -> AbstractAsyncContextManager[Sandbox]:
        return sandbox.open_sandbox(spec, options)

    def reap_stale(self, options: SandboxOptions) -> list[str]:
        """Delete sandbox pools under the root whose owner process is dead, and kill the cgroups
        (with every process in them) of owners that died, wherever their pools were."""
        removed = slots.reap_stale(options.root or sandbox.default_root())
        return removed + tracking.reap_orphaned()

    @property
    def pool(self) -> SandboxPool:
        return sandbox.open_pool


BACKEND: SandboxBackend = LocalBackend()
