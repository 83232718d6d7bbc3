"""trajectories.jsonl merged ahead (`agent.store.merge_ahead`): batch files whose prompts are all
answered are copied into a temp file as the run goes, and the end's merge continues from it only
while every copied file is as it was copied and none of its keys is left out. Each test writes a
real run directory through `RunDirectory` and compares the merged bytes and counts with a merge
of a copy of the same batch files read line by line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config.verify_config import VerifyOptions
from agent.store.directory import RunDirectory
from agent.store.durable import TEMP_SUFFIX
from agent.store.merge_ahead import MergeAhead
from agent.store.merge_report import MergeReport
from agent.store.shard_index import ShardChanged
from tests.support.merges import merged_both_ways
from tests.support.run_dirs import opened
from tests.support.scripted_backend import run_scripted, scripted_config
from tests.test_end_of_run import entry_line
from tests.test_merge_shard import tombstone

TOOLS = {"terminal", "web_search"}


def batch(number: int, keys: str) -> list[tuple[int, bytes]]:
    return [(number, entry_line(key, number * 10 + i)) for i, key in enumerate(keys)]


def temps(run: Path) -> list[str]:
    return sorted(p.name for p in run.glob(f".*{TEMP_SUFFIX}"))


class Continued:
    """Counts the merges that continued from the files copied ahead."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.times = 0
        real = MergeAhead.continued

        def counting(ahead: MergeAhead, target: Path):  # type: ignore[no-untyped-def]
            self.times += 1
            return real(ahead, target)

        monkeypatch.setattr(MergeAhead, "continued", counting)


def checked(run: Path, store: RunDirectory, exclude: frozenset[str] = frozenset()) -> MergeReport:
    merged, _read = merged_both_ways(run, store, TOOLS, exclude)
    assert temps(run) == []
    return merged


def test_the_end_continues_from_the_files_merged_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    continued, run = Continued(monkeypatch), tmp_path / "run"
    with opened(run) as store:
        for number, line in batch(0, "cab") + batch(1, "ed") + [(1, tombstone("t", 12))]:
            store.append_result(number, line)
        assert store.merge_ahead(0, TOOLS) and store.merge_ahead(1, TOOLS)
        assert store.merge_ahead(2, TOOLS)  # no file (every prompt discarded): passed over
        assert len(temps(run)) == 1 and not (run / "trajectories.jsonl").exists()  # not renamed yet
        for number, line in [*batch(3, "gf"), (3, entry_line("a", 0))]:  # a again: a duplicate
            store.append_result(number, line)
        merged = checked(run, store)
    assert continued.times == 1 and merged.ahead_files == 2
    assert (merged.written, merged.duplicates, merged.tombstones) == (7, 1, 1)


@pytest.mark.parametrize(
    "change",
    ["a line appended to a copied file", "a copied key left out", "a file before the copied ones"],
)
def test_the_end_merges_everything_when_the_files_merged_ahead_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    continued, run = Continued(monkeypatch), tmp_path / "run"
    with opened(run) as store:
        for number, line in batch(1, "ab") + batch(2, "cd"):
            store.append_result(number, line)
        assert store.merge_ahead(1, TOOLS) and store.merge_ahead(2, TOOLS)
        if change == "a line appended to a copied file":
            store.append_result(1, entry_line("late", 13))
        elif change == "a file before the copied ones":
            store.append_result(0, entry_line("first", 0))
        exclude = frozenset({"c"} if change == "a copied key left out" else ())
        checked(run, store, exclude)
    assert continued.times == 0  # and the output is still every line, as read (`checked`)


def test_a_file_the_fast_copy_cannot_take_stops_the_merge_ahead(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with opened(run) as store:
        for number, line in [*batch(0, "ab"), (1, entry_line("x", 10, ("invented",))), *batch(2, "c")]:
            store.append_result(number, line)
        assert store.merge_ahead(0, TOOLS)
        assert not store.merge_ahead(1, TOOLS)  # an unknown tool: labelled at the end
        assert not store.merge_ahead(2, TOOLS)  # nothing after it
        merged = checked(run, store)
    assert merged.labelled == 1 and merged.written == 4


def test_a_run_that_ends_unmerged_leaves_no_temp_file_and_the_old_output(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectories.jsonl").write_bytes(earlier := entry_line("old", 5))
    with opened(run) as store:
        store.append_result(0, entry_line("a", 0))
        assert store.merge_ahead(0, TOOLS) and len(temps(run)) == 1
    assert temps(run) == [] and (run / "trajectories.jsonl").read_bytes() == earlier


def test_a_killed_runs_merge_ahead_is_removed_by_the_next_invocation(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    left = MergeAhead(run, "trajectories.jsonl").temp  # what kill -9 leaves: the temp file, half written
    left.write_bytes(b'{"prompt_index": 0')
    with opened(run):
        assert not left.exists() and not (run / "trajectories.jsonl").exists()


def test_a_copied_file_edited_in_place_is_caught_even_with_its_size_and_mtime_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    continued, run = Continued(monkeypatch), tmp_path / "run"
    with opened(run) as store:
        for number, line in [*batch(0, "ab"), *batch(1, "c")]:
            store.append_result(number, line)
        assert store.merge_ahead(0, TOOLS)
        shard, was = run / "batch_0.jsonl", (run / "batch_0.jsonl").stat()
        shard.write_bytes(shard.read_bytes().replace(b'"value": "b"', b'"value": "B"'))
        os.utime(shard, ns=(was.st_atime_ns, was.st_mtime_ns))  # the change time moves on regardless
        with pytest.raises(ShardChanged, match="changed before the merge"):  # as without merging ahead
            store.merge(TOOLS, counted=True)
    assert continued.times == 0 and temps(run) == [] and not (run / "trajectories.jsonl").exists()


# A child process: the file size limit makes the temp file's writes fail (EFBIG, as a full disk
# fails them with ENOSPC) once the batch files are written.
FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from tests.support.run_dirs import opened
from tests.support.scripted_backend import run_scripted, scripted_config
from tests.test_end_of_run import entry_line
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
run = Path(sys.argv[1])
with opened(run) as store:
    for b in range(6):
        for i in range(10):
            store.append_result(b, entry_line(f"k{b}-{i}", b * 10 + i))
    limit = 3 * (run / "batch_0.jsonl").stat().st_size
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    print([store.merge_ahead(b, {"terminal"}) for b in range(6)])
    print(sorted(p.name for p in run.glob(".*.tmp")))
"""


def test_a_full_disk_stops_the_merge_ahead_and_the_run_goes_on(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path / "run")],
        cwd=root, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    copied, left = done.stdout.splitlines()
    first_failed = copied.index("False")  # where the buffered writes hit the limit
    assert copied[1:first_failed].count("True") >= 2 and "True" not in copied[first_failed:]
    assert left == "[]"  # the temp file is removed
    assert "merging trajectories.jsonl ahead stopped (the end merges it all)" in done.stderr


@pytest.mark.parametrize(("keep", "ahead"), [("all", True), ("passing", False)])
def test_a_run_merges_ahead_unless_keep_may_withdraw_entries_at_the_end(
    tmp_path: Path, keep: str, ahead: bool
) -> None:
    config = scripted_config(
        tmp_path, [f"prompt {i}" for i in range(6)], "ahead", verify=VerifyOptions(keep=keep)
    )
    seen: list[list[str]] = []
    run_scripted(config, after=lambda: seen.append(temps(config.run_dir)))  # every job done, before the end
    assert bool(seen[0]) is ahead and temps(config.run_dir) == []
    stats = json.loads((config.run_dir / "statistics.json").read_text())
    assert stats["merge"]["ahead_files"] == (3 if ahead else 0)  # batches of 2
