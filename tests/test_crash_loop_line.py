"""The crash-loop guard of the local scheduler says its one line once, however many dead
workers the parent reads in the pass that crosses the limit."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from agent.batch import scheduler as scheduler_module
from agent.batch.crew import Member
from agent.batch.losses import crash_loop_limit
from agent.batch.scheduler import Scheduler
from agent.cli.batch_cli import build_run_config
from agent.cli.command_line import read_command_line
from agent.cli.flags import BATCH


@dataclass
class _DeadProcess:
    pid: int
    exitcode: int = -9


def test_two_workers_found_dead_in_one_pass_past_the_limit_give_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, each death read in the pass that crossed the limit said "stopping the run"
    (test_batch_heal's crash-loop test saw the line twice under load) and replaced its worker."""
    argv = ["--dataset_file=d.jsonl", "--batch_size=2", "--run_name=r", "--num_workers=2"]
    values = read_command_line(BATCH, argv)
    assert values is not None
    spawned: list[int] = []
    monkeypatch.setattr(scheduler_module, "spawn", lambda *args, **kwargs: spawned.append(args[2]))
    monkeypatch.setattr(scheduler_module, "reap_stale", lambda options: [])  # no process left anything
    scheduler = Scheduler(build_run_config(values), lambda event: None, lambda: None)
    limit = crash_loop_limit(2)
    with caplog.at_level(logging.WARNING, logger="agent.batch.scheduler"):
        for pid in range(limit + 2):  # the last two die in the same pass
            scheduler._lose(Member(slot=pid % 2, proc=_DeadProcess(1000 + pid), jobs=None, events=None))  # type: ignore[arg-type]
    lines = [r.getMessage() for r in caplog.records if "stopping the run" in r.getMessage()]
    assert len(lines) == 1 and f"{limit + 1} workers died" in lines[0], lines
    assert len(spawned) == limit  # a replacement for each death before the line, none after
    assert scheduler.tally.stopped_by == "crash_loop"
    assert scheduler.book.as_dict()["losses"] == limit + 2  # every death is still counted
