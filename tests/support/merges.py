"""The end's merge of a run directory checked against reading every line (this module holds no tests)."""

from __future__ import annotations

import shutil
from collections.abc import Collection
from pathlib import Path

from agent.store.directory import RunDirectory
from agent.store.merge import merge_run
from agent.store.merge_report import MergeReport


def merged_both_ways(
    run: Path, store: RunDirectory, tools: Collection[str], exclude: Collection[str] = ()
) -> tuple[MergeReport, MergeReport]:
    """The end's merge of `run` through `store` (the lines counted as appended), and the merge of
    a copy of its batch files read line by line; asserts they wrote the same bytes and counted
    the same, and returns both reports."""
    store.take_appended()
    store.sync()
    slow = run.parent / f"{run.name}-read"
    slow.mkdir()
    for shard in run.glob("batch_*.jsonl"):
        shutil.copyfile(shard, slow / shard.name)
    merged = store.merge(tools, exclude=exclude, counted=True)
    expected = merge_run(slow, tools, exclude=exclude)
    assert (run / "trajectories.jsonl").read_bytes() == (slow / "trajectories.jsonl").read_bytes()
    assert {**merged.as_dict(), "ahead_files": 0} == expected.as_dict()
    assert merged.kept_keys == expected.kept_keys
    return merged, expected
