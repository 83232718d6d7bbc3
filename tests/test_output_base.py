"""trajectories.jsonl continued in place (`agent.store.output_base`): an end whose batch files
begin with those the last end merged whole, untouched since, appends only the lines of the files
after them to the output that end left; with nothing new it writes nothing. Whatever the path,
the output holds the bytes a merge of every file from scratch writes, and the statistics and
the report are those of a full recount."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from agent.batch.end_fold import EndFold
from agent.batch.tally import RunTally
from agent.servers.simulated.server import SimulatedEndpoint
from agent.store import merge_shard
from agent.store.merge import merge_run
from agent.store.merge_report import MergeReport
from agent.store.output_figures import FIGURES_FILE
from agent.toolbox.registry import TOOL_TO_TOOLSET_MAP
from tests.support.batch import BatchCLI, prompts_dataset, read_json
from tests.support.run_dirs import opened
from tests.test_earlier_lines import tombstone
from tests.test_end_of_run import assert_as_recounted
from tests.test_output_figures import ended, rich
from tests.test_saved_records import invocation

BATCH = 5  # prompts per batch file: batch N holds indices 5N..5N+4


def end(
    run: Path,
    tmp_path: Path,
    appends: list[tuple[int, bytes]] | None = None,
    *,
    planned: int = 0,
    ahead: bool = False,
) -> MergeReport:
    """An invocation as a run goes: `planned` prompts, those beyond the lines already written
    to run; it recalls the kept figures, appends `appends` (merging ahead as it goes, with
    `ahead`), and ends: merged, statistics.json and report.html written, checked against a
    recount. What the merge did."""
    tally = RunTally(BATCH)
    done = {int(line.split(b'"prompt_index": ')[1].split(b",")[0]) for line in _written(run)}
    for index in range(planned):
        tally.plan(index, done=index in done)
    fold = EndFold(run, tally, ahead=ahead)
    with opened(run) as store:
        fold.recall(store)
        for batch, line in appends or ():
            store.append_result(batch, line)
            if ahead:
                fold.take(store)
                tally.batches[batch]["processed"] += 1
                fold.merge_ahead(store)
        merged = ended(fold, store, tmp_path, len(appends or ()))
    assert_as_recounted(run, tmp_path)
    assert (run / "trajectories.jsonl").read_bytes() == _merged_from_scratch(run, tmp_path)
    return merged


def _written(run: Path) -> list[bytes]:
    return [line for path in sorted(run.glob("batch_*.jsonl")) for line in path.read_bytes().splitlines()]


def _merged_from_scratch(run: Path, tmp_path: Path) -> bytes:
    """trajectories.jsonl as a merge of a copy of the batch files alone writes it."""
    copy = tmp_path / "from-scratch"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    for path in run.glob("batch_*.jsonl"):
        shutil.copy(path, copy / path.name)
    merge_run(copy, set(TOOL_TO_TOOLSET_MAP))
    return (copy / "trajectories.jsonl").read_bytes()


def _identity(path: Path) -> tuple[int, int, int]:
    status = path.stat()
    return status.st_ino, status.st_size, status.st_mtime_ns


def test_a_resume_with_nothing_new_writes_nothing_to_the_output(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = end(run, tmp_path, rich("abcde") + rich("fgh", start=5, batch=1), planned=8)
    assert first.in_place_files == 0 and (run / FIGURES_FILE).exists()
    before = _identity(run / "trajectories.jsonl")
    again = end(run, tmp_path, planned=8)
    assert again.in_place_files == 2 and again.written == 8 and len(again.kept_keys) == 8
    assert _identity(run / "trajectories.jsonl") == before  # the same file, not written
    assert end(run, tmp_path, planned=8).in_place_files == 2  # and again: its stamp was kept anew


def test_lines_of_new_batch_files_are_appended_to_the_output_in_place(tmp_path: Path) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abcde"), planned=5)
    inode = (run / "trajectories.jsonl").stat().st_ino
    merged = end(run, tmp_path, rich("ij", start=5, batch=1) + rich("k", start=10, batch=2), planned=11)
    assert (merged.in_place_files, merged.written, merged.ahead_files) == (1, 8, 0)
    assert (run / "trajectories.jsonl").stat().st_ino == inode  # appended to, not replaced


def test_files_merged_ahead_are_poured_after_the_output_it_continues(tmp_path: Path) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abcde"), planned=5)
    inode = (run / "trajectories.jsonl").stat().st_ino
    merged = end(
        run, tmp_path, rich("fghij", start=5, batch=1) + rich("k", start=10, batch=2), planned=11, ahead=True
    )
    assert (merged.in_place_files, merged.ahead_files, merged.written) == (1, 2, 11)
    assert (run / "trajectories.jsonl").stat().st_ino == inode
    assert not list(run.glob(".*.tmp"))  # the copies' temp file is gone


def test_a_base_batch_that_gets_lines_again_makes_the_end_write_the_output_whole(tmp_path: Path) -> None:
    """A prompt of batch_0 runs again (its first try failed): its line sorts among the output's."""
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc") + rich("e", start=4) + rich("fg", start=5, batch=1), planned=7)
    inode = (run / "trajectories.jsonl").stat().st_ino
    merged = end(run, tmp_path, rich("d", start=3) + rich("h", start=7, batch=1), planned=8, ahead=True)
    assert merged.in_place_files == 0 and merged.ahead_files == 2  # merged ahead as before
    assert (run / "trajectories.jsonl").stat().st_ino != inode


def _edit_in_place(run: Path) -> None:
    """The same bytes written back over a batch file: only its change time tells."""
    path = run / "batch_0.jsonl"
    data = path.read_bytes()
    with path.open("r+b") as handle:
        handle.write(data)


def _replace_output(run: Path) -> None:
    path = run / "trajectories.jsonl"
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)


def _torn_output(run: Path) -> None:
    """What a kill while appending leaves: a part of a line after the output."""
    with (run / "trajectories.jsonl").open("ab") as handle:
        handle.write(b'{"prompt_index": 9, "conver')


@pytest.mark.parametrize("change", [_edit_in_place, _replace_output, _torn_output])
def test_an_output_or_file_changed_since_the_last_end_is_written_whole(tmp_path: Path, change: Any) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abcde") + rich("fg", start=5, batch=1), planned=7)
    change(run)
    merged = end(run, tmp_path, rich("k", start=10, batch=2), planned=11)
    assert merged.in_place_files == 0 and merged.written == 8


def test_a_new_line_of_a_key_the_output_holds_is_a_duplicate(tmp_path: Path) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abcde"), planned=5)
    duplicate = [(1, rich("c", start=2)[0][1])]  # c's line again, in a later file
    end(run, tmp_path, duplicate + rich("f", start=5, batch=1), planned=6)
    keys = (run / "trajectories.jsonl").read_bytes().count(b'"prompt_key": "c"')
    assert keys == 1


def test_a_failed_append_leaves_the_output_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abcde"), planned=5)
    before = (run / "trajectories.jsonl").read_bytes()
    real = merge_shard.copy_shard

    def full_disk(path: Path, shard: Any, tools: Any, exclude: Any, kept: Any, out: Any, *rest: Any) -> Any:
        out.write(b'{"prompt_index": 5, "half a line')
        out.flush()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("agent.store.merge.copy_shard", full_disk)
    with pytest.raises(OSError, match="No space"):
        end(run, tmp_path, rich("f", start=5, batch=1), planned=6)
    assert (run / "trajectories.jsonl").read_bytes() == before
    monkeypatch.setattr("agent.store.merge.copy_shard", real)
    assert end(run, tmp_path, planned=6).written == 6


def test_the_runner_continues_the_output_of_its_last_end(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    """The real command: a run, a resume with nothing left (the output not written), and one
    after the dataset grew by a batch (its lines appended, the earlier ones not copied)."""
    cli = BatchCLI(tmp_path, sim_endpoint)
    dataset = cli.workdir / "prompts.jsonl"
    prompts_dataset(dataset, [f"task {i}: list the files" for i in range(10)])
    flags = (f"--dataset_file={dataset}", "--batch_size=5", "--run_name=base", "--num_workers=1")
    assert cli.run(*flags).returncode == 0
    output = cli.run_dir("base") / "trajectories.jsonl"
    before = _identity(output)
    rerun = cli.run(*flags, "--resume")
    assert rerun.returncode == 0, rerun
    merge = read_json(cli.run_dir("base") / "statistics.json")["merge"]
    assert (merge["in_place_files"], merge["written"], _identity(output)) == (2, 10, before)
    prompts_dataset(dataset, [f"task {i}: list the files" for i in range(15)])
    grown = cli.run(*flags, "--resume")
    assert grown.returncode == 0, grown
    stats = read_json(cli.run_dir("base") / "statistics.json")
    assert (stats["merge"]["in_place_files"], stats["trajectories"]["entries"]) == (2, 15)
    assert output.stat().st_ino == before[0]
    assert output.read_bytes() == _merged_from_scratch(cli.run_dir("base"), tmp_path)
    assert_as_recounted(cli.run_dir("base"), tmp_path)


def test_lines_added_to_the_last_file_after_its_own_are_appended_in_place(tmp_path: Path) -> None:
    """The dataset grew by fewer prompts than a batch: batch_0 gains d and e after a b c."""
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc"), planned=3)
    inode = (run / "trajectories.jsonl").stat().st_ino
    merged = end(run, tmp_path, rich("de", start=3), planned=5)
    assert (merged.in_place_files, merged.written) == (1, 5)
    assert (run / "trajectories.jsonl").stat().st_ino == inode
    merged = end(run, tmp_path, rich("fg", start=5, batch=1) + rich("e", start=4), planned=7)  # e again
    assert merged.in_place_files == 0  # a duplicate: the whole run counted again, written whole


def test_the_last_files_new_lines_come_before_the_files_merged_ahead(tmp_path: Path) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc"), planned=3)
    appends = rich("d", start=3) + rich("fghij", start=5, batch=1) + rich("e", start=4)
    merged = end(run, tmp_path, appends, planned=10, ahead=True)
    assert (merged.in_place_files, merged.ahead_files, merged.written) == (1, 1, 10)


def test_a_line_added_to_the_last_file_that_sorts_among_its_lines_makes_the_end_write_it_whole(
    tmp_path: Path,
) -> None:
    """c (index 2) failed at first and runs again: its line must go between b and d."""
    run = tmp_path / "run"
    end(run, tmp_path, rich("ab") + rich("d", start=3), planned=4)
    inode = (run / "trajectories.jsonl").stat().st_ino
    merged = end(run, tmp_path, rich("c", start=2), planned=4)  # the plan says c is left: no base
    assert merged.in_place_files == 0 and (run / "trajectories.jsonl").stat().st_ino != inode
    end(run, tmp_path, rich("ab") + rich("d", start=3), planned=0)
    merged = end(run, tmp_path, rich("x", start=2), planned=0)  # nothing planned: the end itself tells
    assert merged.in_place_files == 0


def test_a_tombstone_added_to_the_last_file_makes_the_end_write_it_whole(tmp_path: Path) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc"), planned=3)
    merged = end(run, tmp_path, [(0, tombstone("b", 1))])  # (what it withdraws is the caller's)
    assert (merged.in_place_files, merged.tombstones, merged.written) == (0, 1, 3)


@pytest.mark.parametrize("checkpoint_after", [0, 1, 2])
def test_lines_a_killed_invocation_added_to_the_last_file_are_merged_once(
    tmp_path: Path, checkpoint_after: int
) -> None:
    """Killed after appending d e to batch_0 (their records saved or not): the next end's output
    holds each line once, in order, whatever it continues from."""
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc"), planned=3)
    invocation(run, rich("de", start=3), checkpoint_after=checkpoint_after)
    merged = end(run, tmp_path, rich("f", start=5, batch=1), planned=6)
    assert merged.written == 6
