"""The merge's fast path (`agent.store.merge_shard.copy_shard`): a batch file this process
wrote whole is copied from one read, in index order, from its records. Each test writes a real
run directory through `RunDirectory`, merges it the fast way (the lines counted as appended),
then merges a copy without records (every line read and parsed, the slow path) and compares the
merged bytes and every count."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent.store import merge_shard
from agent.store.directory import RunDirectory
from agent.store.jsonl import read_lines
from agent.store.merge_report import MergeReport
from agent.store.shard_index import ShardChanged
from tests.support.merges import merged_both_ways
from tests.support.run_dirs import opened
from tests.test_end_of_run import entry_line

TOOLS = {"terminal", "web_search"}


def tombstone(key: str, index: int) -> bytes:
    entry = {"prompt_index": index, "discarded": True, "metadata": {"prompt_key": key}}
    return (json.dumps(entry) + "\n").encode()


def fast_and_slow(
    run: Path, appends: list[tuple[int, bytes]], exclude: frozenset[str] = frozenset()
) -> tuple[MergeReport, MergeReport, int]:
    """`appends` (batch number, line) written to `run` by one invocation, then merged as the end
    of a run merges (counted as appended), and a copy of the shards merged line by line; the two
    reports and how many files took the fast path. The merged files must be the same bytes."""
    copies = 0
    real = merge_shard.copy_shard

    def counting(*args: Any) -> merge_shard.Copied | None:
        nonlocal copies
        copied = real(*args)
        copies += copied is not None
        return copied

    with pytest.MonkeyPatch.context() as patch, opened(run) as store:
        patch.setattr("agent.store.merge.copy_shard", counting)
        for batch, line in appends:
            store.append_result(batch, line)
        fast, slow = merged_both_ways(run, store, TOOLS, exclude)
    return fast, slow, copies


def test_a_fresh_runs_shards_are_copied_whole_in_index_order(tmp_path: Path) -> None:
    appends = [(0, entry_line(k, i, ("terminal",))) for k, i in (("c", 2), ("a", 0), ("b", 1))]
    appends += [(1, entry_line(k, i)) for k, i in (("e", 11), ("d", 10), ("f", 10))]  # d, f: same index
    fast, _slow, copies = fast_and_slow(tmp_path / "run", appends)
    assert copies == 2 and fast.written == 6 and fast.counted_left_out == 0
    keys = [e["metadata"]["prompt_key"] for _line, e in read_lines(tmp_path / "run" / "trajectories.jsonl")]
    assert keys == ["a", "b", "c", "d", "f", "e"]  # index order; file order among equals


def test_duplicates_tombstones_and_withdrawn_keys_are_counted_as_the_slow_path_counts(tmp_path: Path) -> None:
    appends = [(0, entry_line("a", 0)), (0, entry_line("b", 1)), (0, entry_line("a", 0))]  # a twice
    appends += [(0, tombstone("c", 2)), (1, entry_line("x", 10)), (1, entry_line("b", 1))]  # b in two files
    fast, slow, copies = fast_and_slow(tmp_path / "run", appends, exclude=frozenset({"x"}))
    assert copies == 2
    assert (fast.duplicates, fast.tombstones, fast.withdrawn, fast.written) == (2, 1, 1, 2)
    assert fast.counted_left_out == 3  # a's second line, x, b's second: counted, not merged
    assert slow.counted_left_out == 0  # not counted there: nothing was counted as appended


def test_a_file_calling_an_unknown_tool_is_labelled_the_slow_way(tmp_path: Path) -> None:
    appends = [(0, entry_line("a", 0, ("terminal",))), (1, entry_line("b", 10, ("invented",)))]
    fast, _slow, copies = fast_and_slow(tmp_path / "run", appends)
    assert copies == 1 and fast.labelled == 1 and fast.unknown_tools == {"invented": 1}


@pytest.mark.parametrize("counted", [True, False])  # the later file copied whole, or line by line
def test_a_keys_later_line_after_its_first_was_moved_out_is_a_duplicate(
    tmp_path: Path, counted: bool
) -> None:
    """The first line of `a` calls a tool the run does not keep: the prompt goes to the
    discards (`unkept`), and its later line in another file is a duplicate, never written."""
    with opened(tmp_path / "run") as store:
        store.append_result(0, entry_line("a", 0, ("invented",)))
        store.append_result(1, entry_line("a", 0, ("terminal",)))
        store.append_result(1, entry_line("b", 10))
        store.take_appended()
        merged = store.merge(TOOLS, keep_unknown=False, counted=counted)
    assert [key for key, _entry in merged.unkept] == ["a"] and merged.kept_keys == {"b"}
    assert (merged.written, merged.duplicates, merged.not_kept) == (1, 1, 1)
    assert [e["metadata"]["prompt_key"] for _l, e in read_lines(tmp_path / "run" / "trajectories.jsonl")] == [
        "b"
    ]


def test_a_file_larger_than_the_whole_read_goes_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    appends = [(0, entry_line(k, i)) for i, k in enumerate("abcd")] + [(1, entry_line("z", 10))]
    monkeypatch.setattr(merge_shard, "WHOLE_READ_BYTES", len(entry_line("z", 10)) + 1)
    _fast, _slow, copies = fast_and_slow(tmp_path / "run", appends)
    assert copies == 1  # batch_1 only


def test_a_recorded_line_changed_in_place_stops_the_fast_copy(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RunDirectory(run) as store:
        store.lock()
        for key, index in (("a", 0), ("b", 1)):
            store.append_result(0, entry_line(key, index))
        store.take_appended()
        shard = run / "batch_0.jsonl"
        status = shard.stat()
        data = shard.read_bytes()
        shard.write_bytes(data.replace(b'"value": "b"', b'"value": "B"'))  # same size, inode
        os.utime(shard, ns=(status.st_atime_ns, status.st_mtime_ns))  # and mtime: only the CRC tells
        with pytest.raises(ShardChanged, match="changed before the merge"):
            store.merge(TOOLS, counted=True)
    assert not (run / "trajectories.jsonl").exists()  # nothing half-written in its place
    assert not [p for p in run.iterdir() if p.name.startswith(".trajectories")]
