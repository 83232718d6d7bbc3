"""What a run asks of its sandboxes, whatever the backend."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_IMAGE = "python:3.11-slim"


@dataclass(frozen=True)
class SandboxOptions:
    backend: str = "local"
    default_image: str = DEFAULT_IMAGE
    network: bool = False  # containers: allow network access
    memory_mb: int = 1024
    cpus: float = 1.0
    pids_limit: int = 256
    command_timeout: float = 180.0  # default per-command timeout of the terminal tool
    root: str | None = None  # local/bwrap: where per-prompt directories are made (default: tmp)
