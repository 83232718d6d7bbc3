"""The `bwrap` backend: every command in fresh namespaces on a read-only root (see `sandbox`,
and `command` for the bubblewrap command line). Commands run on the event loop (`launch`),
file work in threads."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from agent.protocols import RowProblem, Sandbox, SandboxBackend, SandboxOptions, SandboxPool, SandboxSpec
from agent.sandboxes.bwrap import sandbox


class BwrapBackend:
    def unavailable_reason(self, options: SandboxOptions) -> str | None:
        return sandbox.unavailable_reason(options)

    def open(self, spec: SandboxSpec, options: SandboxOptions) -> AbstractAsyncContextManager[Sandbox]:
        return sandbox.open_sandbox(spec, options)

    def reap_stale(self, options: SandboxOptions) -> list[str]:
        return sandbox.reap_stale(options.root)

    @property
    def pool(self) -> SandboxPool | None:
        return None  # a sandbox costs one directory: nothing worth reusing

    def row_problem(self, image: str | None, cwd: str | None) -> RowProblem | None:
        if image is not None and not image.startswith("/"):
            return RowProblem(
                "image",
                f"the bwrap sandbox backend runs no registry images ({image!r}), only an unpacked root "
                "filesystem named by its absolute path; use --sandbox=docker",
            )
        return None

    def run_options(self, options: SandboxOptions, *, default_image_used: bool) -> SandboxOptions:
        return options

    def prepare_worker(self, options: SandboxOptions) -> None:
        return None  # each command's bwrap is its own process tree, gone with its namespace


BACKEND: SandboxBackend = BwrapBackend()
