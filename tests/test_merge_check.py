"""The merge checks this invocation's entries against what the run counted from their events
(`agent.batch.tally.MergeCheck`): a batch file edited between the run and the merge is one
warning line and the `merge_check` section of statistics.json; the figures of the run's own
entries are those it counted from their events, the merge does not count them again.

The run here is the real `BatchRun` (run directory, merge, statistics, report) on a scripted
run backend (tests/support/scripted_backend.py), which can edit a batch file when its workers
are gone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted_backend import API_CALLS, run_scripted, scripted_config


def run(
    tmp_path: Path, after: Callable[[Path], None] = lambda run_dir: None, exit_code: int = 0
) -> dict[str, Any]:
    """A run of three prompts on the scripted backend, exiting `exit_code`; its statistics.json."""
    config = scripted_config(tmp_path, [f"prompt {i}" for i in range(3)], "checked")
    code = run_scripted(config, after=lambda: after(config.run_dir))
    assert code == exit_code
    stats: dict[str, Any] = json.loads((config.run_dir / "statistics.json").read_text())
    return stats


def edit_first_entry(run_dir: Path) -> None:
    """Between the run and its merge, one entry of batch_0.jsonl gains a model call."""
    shard = run_dir / "batch_0.jsonl"
    lines = shard.read_bytes().splitlines()
    entry = json.loads(lines[0])
    entry["api_calls"] += 1
    shard.write_bytes(b"\n".join([json.dumps(entry).encode(), *lines[1:]]) + b"\n")


def test_a_run_whose_merged_entries_are_as_counted_says_so(tmp_path: Path) -> None:
    stats = run(tmp_path)
    assert stats["merge_check"] == {
        "entries_counted": 3,
        "entries_checked": 3,
        "missing": 0,
        "differences": {},
        "differing_keys": [],
        "ok": True,
    }
    assert stats["this_invocation"]["api_calls"] == stats["trajectories"]["api_calls"] == 3 * API_CALLS


def test_a_shard_edited_between_the_run_and_the_merge_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agent.batch.run"):
        stats = run(tmp_path, after=edit_first_entry)
    check = stats["merge_check"]
    assert check["ok"] is False
    assert check["differences"] == {"api_calls": 1}
    assert check["entries_checked"] == 3 and check["missing"] == 0
    edited = json.loads((tmp_path / "data" / "checked" / "batch_0.jsonl").read_bytes().splitlines()[0])
    assert check["differing_keys"] == [edited["metadata"]["prompt_key"]]
    warnings = [
        r.getMessage() for r in caplog.records if "differs from what this run counted" in r.getMessage()
    ]
    assert len(warnings) == 1 and "api_calls in 1" in warnings[0]
    # the merge counted nothing again: the figures of this run's entries are the run's own
    assert stats["this_invocation"]["api_calls"] == stats["trajectories"]["api_calls"] == 3 * API_CALLS


def test_an_entry_missing_from_the_merge_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def drop_first_entry(run_dir: Path) -> None:
        shard = run_dir / "batch_0.jsonl"
        shard.write_bytes(b"\n".join(shard.read_bytes().splitlines()[1:]) + b"\n")

    with caplog.at_level(logging.WARNING, logger="agent.batch.run"):
        stats = run(tmp_path, after=drop_first_entry, exit_code=1)  # its prompt is not done now
    assert stats["merge_check"]["missing"] == 1 and stats["merge_check"]["ok"] is False
    assert any("1 missing" in r.getMessage() for r in caplog.records)
