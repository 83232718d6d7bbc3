"""The `docker` backend: one container per prompt through the docker SDK, on Docker or Podman's
compatible socket (see `sandbox`; `engine`, `lifecycle` and `container_exec` for the parts).
Importing it imports the docker SDK: `agent.sandboxes` loads it only when it is asked for."""

from __future__ import annotations

import dataclasses
from contextlib import AbstractAsyncContextManager

from agent.protocols import RowProblem, Sandbox, SandboxBackend, SandboxOptions, SandboxPool, SandboxSpec
from agent.sandboxes.docker import disk_image, lifecycle, sandbox
from agent.sandboxes.docker.engine import engine_client


class DockerBackend:
    def unavailable_reason(self, options: SandboxOptions) -> str | None:
        return sandbox.unavailable_reason(options)

    def open(self, spec: SandboxSpec, options: SandboxOptions) -> AbstractAsyncContextManager[Sandbox]:
        return sandbox.open_sandbox(spec, options)

    def reap_stale(self, options: SandboxOptions) -> list[str]:
        """Remove the containers of ours whose owner process is dead, then their disk images."""
        client = engine_client()
        return lifecycle.reap_stale(client) + disk_image.reap(client, options.root)

    @property
    def pool(self) -> SandboxPool | None:
        return None  # a container holds a prompt's files: never reused

    def row_problem(self, image: str | None, cwd: str | None) -> RowProblem | None:
        return None  # every image is the engine's to find (an unknown one fails its prompt)

    def run_options(self, options: SandboxOptions, *, default_image_used: bool) -> SandboxOptions:
        """Without a row that needs it, the default image (--image) is neither checked on the
        engine nor recorded."""
        return options if default_image_used else dataclasses.replace(options, default_image=None)

    def prepare_worker(self, options: SandboxOptions) -> None:
        return None  # the engine holds the containers; the client is made on first use


BACKEND: SandboxBackend = DockerBackend()
