"""A scripted `RunBackend` (the seam of `agent.protocols.run_backend`) for tests of the real
`BatchRun`: it answers each job at once with the entry a worker would write, and runs `after`
at shutdown (the workers gone, before the merge)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agent.batch.backend import Backend, BackendFactory, Tally
from agent.batch.events import Finished, WorkerEvent
from agent.batch.jobs import Job
from agent.config.run_config import RunConfig
from agent.store.jsonl import encode_line

USAGE = {"prompt_tokens": 10.0, "completion_tokens": 5.0, "total_tokens": 15.0}
API_CALLS = 2


def entry_of(job: Job) -> dict[str, Any]:
    """The entry a worker writes for a conversation that completed in `API_CALLS` calls."""
    return {
        "prompt_index": job.index,
        "conversations": [
            {"from": "human", "value": job.prompt},
            {"from": "gpt", "value": "<think>easy</think>done"},
        ],
        "completed": True,
        "partial": False,
        "api_calls": API_CALLS,
        "toolsets_used": list(job.toolsets),
        "tool_stats": {},
        "metadata": {
            "batch_num": job.batch_num,
            "prompt_key": job.key,
            "outcome": "completed",
            "usage": USAGE,
        },
    }


class ScriptedBackend:
    """A `RunBackend` double: each job is answered as it is read; `after` runs at shutdown
    (the workers gone, before the merge)."""

    def __init__(
        self,
        on_event: Callable[[WorkerEvent], None],
        after: Callable[[], None],
    ) -> None:
        self.on_event, self.after = on_event, after
        self.tally = Tally()

    def open(self) -> None:
        return

    def serve(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            line = encode_line(entry_of(job))
            self.on_event(
                Finished(job.key, job.batch_num, job.index, line, True, "completed", USAGE, API_CALLS)
            )

    def stop_feeding(self, reason: str) -> None:
        self.tally.stopped_by = reason

    def cancel(self) -> None:
        return

    def shutdown(self) -> None:
        self.after()


def scripted(after: Callable[[], None]) -> BackendFactory:
    def make(
        config: RunConfig, on_event: Callable[[WorkerEvent], None], on_tick: Callable[[], None]
    ) -> Backend:
        return ScriptedBackend(on_event, after)

    return make
