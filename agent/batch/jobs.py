"""A job: one prompt of the dataset as the parent hands it to a worker process (picklable)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.protocols import SandboxSpec


@dataclass(frozen=True)
class Job:
    index: int  # position among the dataset's valid rows
    key: str  # the prompt's key (`agent.store.keys.prompt_key`)
    prompt: str
    image: str | None
    cwd: str | None
    metadata: dict[str, Any]  # the dataset row's own metadata
    batch_num: int  # the shard `batch_N.jsonl` its line goes to
    toolsets: tuple[str, ...]  # sampled from the run's distribution

    @property
    def log_prefix(self) -> str:
        return f"[B{self.batch_num}:P{self.index}] "

    def sandbox_spec(self, run_name: str) -> SandboxSpec:
        return SandboxSpec(run_name, self.key, image=self.image, cwd=self.cwd)
