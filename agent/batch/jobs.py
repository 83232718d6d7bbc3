"""A job: one prompt of the dataset as the parent hands it to a worker process (picklable), and
the channels a worker takes jobs from and sends events to."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agent.config.sampling import Sampling
from agent.config.verify_config import Checks
from agent.protocols import SandboxSpec
from agent.store.keys import split_key


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
    sampling: Sampling | None = (
        None  # its row's over the flags' (AgentConfig.prompt_sampling); None: the run's
    )
    sample_index: int = 0  # which of the prompt's --samples_per_prompt attempts this is
    checks: Checks | None = None  # what the attempt is verified with; None: nothing

    @property
    def prompt_id(self) -> str:
        """The prompt's identity, the same for all its samples (`metadata.prompt_id`)."""
        return split_key(self.key)[0]

    @property
    def log_prefix(self) -> str:
        return f"[B{self.batch_num}:P{self.index}] "

    def sampling_record(self) -> dict[str, Any]:
        """The entry's `metadata.sampling`: the sampling fields its requests carried; nothing
        when none was chosen (the entry's bytes are then those of a run without the feature)."""
        sent = self.sampling.sent() if self.sampling is not None else {}
        return {"sampling": sent} if sent else {}

    def sandbox_spec(self, run_name: str) -> SandboxSpec:
        return SandboxSpec(run_name, self.key, image=self.image, cwd=self.cwd)


def sample_sampling(sampling: Sampling, sample_index: int) -> Sampling:
    """A sample's sampling: with a model seed chosen (--model_seed or the row's), sample s sends
    seed + s, so N attempts differ even on a deterministic server; sample 0 sends it unchanged."""
    if sampling.seed is None or sample_index == 0:
        return sampling
    return replace(sampling, seed=sampling.seed + sample_index)


class JobSource(Protocol):
    """Where a worker takes its next job: the local backend's process queue, a Ray actor's inbox.
    None means no more jobs (or `stopping` was set while waiting)."""

    async def next(self, stopping: asyncio.Event) -> Job | None: ...


class EventSink(Protocol):
    """Where a worker puts its events (`agent.batch.events`) and log records for the parent."""

    def put(self, item: Any) -> None: ...
