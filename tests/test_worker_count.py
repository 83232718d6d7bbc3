"""A run starts no more workers than it has prompts to run: each is a process start (an
interpreter, the model client, a sandbox pool), so 2 prompts under `--num_workers=4` get 2
workers, with the whole of `--max_inflight` between them. The real `BatchRun` on a scripted run
backend (tests/support/scripted_backend.py) whose factory records the config it was given."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from agent.batch.backend import Backend
from agent.batch.dataset import scan_dataset
from agent.batch.events import WorkerEvent
from agent.batch.run import BatchRun
from agent.config.agent_config import AgentConfig
from agent.config.run_config import RunConfig
from agent.protocols import SandboxOptions
from tests.support.scripted_backend import ScriptedBackend


def _run(tmp_path: Path, prompts: int, num_workers: int, resume: bool = False) -> RunConfig:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(prompts)))
    config = RunConfig(
        dataset_file=str(dataset), batch_size=2, run_name="count", agent=AgentConfig(),
        output_dir=str(tmp_path / "data"), distribution="terminal_only", num_workers=num_workers,
        max_inflight=64, sandbox=SandboxOptions(backend="local", root=str(tmp_path / "sandboxes")),
        resume=resume,
    )  # fmt: skip
    given: list[RunConfig] = []

    def make(
        config: RunConfig, on_event: Callable[[WorkerEvent], None], on_tick: Callable[[], None]
    ) -> Backend:
        given.append(config)
        return ScriptedBackend(on_event, lambda: None)

    scan = scan_dataset(dataset, backend="local", keys=True)
    assert BatchRun(config, Console(quiet=True), backend=make).run(scan) == 0
    assert len(given) <= 1
    return given[0] if given else config


@pytest.mark.parametrize(("prompts", "workers", "started"), [(2, 4, 2), (1, 4, 1), (9, 4, 4), (3, 1, 1)])
def test_no_more_workers_start_than_prompts_to_run(
    tmp_path: Path, prompts: int, workers: int, started: int
) -> None:
    config = _run(tmp_path, prompts, workers)
    assert config.num_workers == started
    assert config.inflight_per_worker == -(-64 // started)  # the in-flight limit is shared by fewer


def test_a_resume_counts_only_the_prompts_left(tmp_path: Path) -> None:
    _run(tmp_path, 2, 4)
    assert _run(tmp_path, 3, 4, resume=True).num_workers == 1  # one new prompt
