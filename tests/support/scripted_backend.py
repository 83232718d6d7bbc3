"""A scripted `RunBackend` (the seam of `agent.protocols.run_backend`) for tests of the real
`BatchRun`: it answers each job at once with the entry a worker would write, and runs `after`
at shutdown (the workers gone, before the merge)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

from agent.batch.backend import Backend, BackendFactory, Tally
from agent.batch.dataset import scan_dataset
from agent.batch.events import Finished, WorkerEvent
from agent.batch.jobs import Job
from agent.batch.run import BatchRun
from agent.config.agent_config import AgentConfig
from agent.config.run_config import RunConfig
from agent.protocols import SandboxOptions
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


def scripted_config(tmp_path: Path, prompts: Iterable[str], run_name: str, **fields: Any) -> RunConfig:
    """A run of `prompts` (written to tmp_path/prompts.jsonl) in batches of 2 on the local
    sandbox, output under tmp_path/data; `fields` set any other RunConfig field."""
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": prompt}) + "\n" for prompt in prompts))
    return RunConfig(
        dataset_file=str(dataset),
        batch_size=2,
        run_name=run_name,
        agent=AgentConfig(),
        output_dir=str(tmp_path / "data"),
        distribution="terminal_only",
        sandbox=SandboxOptions(backend="local", root=str(tmp_path / "sandboxes")),
        **fields,
    )


def run_scripted(config: RunConfig, after: Callable[[], None] = lambda: None) -> int:
    """`config`'s run on the scripted backend (`after` runs once every job is done); its exit code."""
    scan = scan_dataset(Path(config.dataset_file), backend="local", keys=True)
    return BatchRun(config, Console(quiet=True), backend=scripted(after)).run(scan)
