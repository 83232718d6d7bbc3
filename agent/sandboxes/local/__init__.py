"""The `local` backend: a private host directory per prompt, commands run by host bash (see
`sandbox`), slots reused within a run's pool (see `slots`)."""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager

from agent.common.secrets import started_secrets
from agent.protocols import RowProblem, Sandbox, SandboxBackend, SandboxOptions, SandboxPool, SandboxSpec
from agent.sandboxes.host import orphans
from agent.sandboxes.local import exposed_secrets, sandbox, slots, tracking

log = logging.getLogger(__name__)


class LocalBackend:
    def unavailable_reason(self, options: SandboxOptions) -> str | None:
        return sandbox.unavailable_reason(options)

    def open(self, spec: SandboxSpec, options: SandboxOptions) -> AbstractAsyncContextManager[Sandbox]:
        return sandbox.open_sandbox(spec, options)

    def reap_stale(self, options: SandboxOptions) -> list[str]:
        """Delete sandbox pools under the root whose owner process is dead (returned), and kill
        the cgroups (with every process in them) of owners that died, wherever their pools were
        (logged)."""
        removed = slots.reap_stale(options.root or sandbox.default_root())
        for group in tracking.reap_orphaned():
            log.warning("killed and removed the cgroup of a dead sandbox owner: %s", group)
        return removed

    @property
    def pool(self) -> SandboxPool:
        return sandbox.open_pool

    def row_problem(self, image: str | None, cwd: str | None) -> RowProblem | None:
        if image is not None:  # commands run on the host's own files: an image would be ignored
            return RowProblem("image", "the local sandbox backend runs no images; use --sandbox=docker")
        return None

    def run_options(self, options: SandboxOptions, *, default_image_used: bool) -> SandboxOptions:
        exposed_secrets.warn_if_exposed(started_secrets().values())  # a wrapper's, our commands read
        return options

    def prepare_worker(self, options: SandboxOptions) -> None:
        # A batch worker starts every child of its own through a sandbox, so each is a command or
        # its orphan: adopting them, closing a sandbox looks at our children, not all of /proc.
        orphans.adopt_orphans()


BACKEND: SandboxBackend = LocalBackend()
