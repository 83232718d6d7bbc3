"""The `docker` backend: one container per prompt through the docker SDK, on Docker or Podman's
compatible socket (see `sandbox`; `engine`, `lifecycle` and `container_exec` for the parts).
Importing it imports the docker SDK: `agent.sandboxes` loads it only when it is asked for."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from agent.protocols import Sandbox, SandboxBackend, SandboxOptions, SandboxPool, SandboxSpec
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


BACKEND: SandboxBackend = DockerBackend()
