"""The line records saved beside each shard (`agent.store.records_file`): a resume loads an
earlier invocation's lines from them instead of reading them, and refuses records that no
longer describe the shard (issue 26: a resume finds its place in seconds at a million prompts).
Every run here is `RunDirectory` on real files, as `BatchRun` drives it: lock, repair, appends,
`write_json` at each checkpoint, close."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from agent.store.index import RunIndex, scan_run
from agent.store.jsonl import read_lines
from agent.store.key_book import EVERY_KEY, KeySet
from agent.store.merge import merge_run
from agent.store.records_file import NAMES_FILE, records_path
from agent.store.shard_index import ShardChanged
from tests.support.run_dirs import opened
from tests.test_end_of_run import entry_line

TOOLS = {"terminal", "web_search"}


def invocation(run_dir: Path, appends: list[tuple[int, bytes]], *, checkpoint_after: int) -> None:
    """One invocation of the runner: it appends `appends` (batch number, line) and checkpoints
    after the first `checkpoint_after` of them, then stops without a
    checkpoint (what SIGKILL leaves: every appended line is on disk, the records maybe not)."""
    with opened(run_dir) as store:
        for number, (batch, line) in enumerate(appends, 1):
            store.append_result(batch, line)
            if number == checkpoint_after:
                store.write_json("checkpoint.json", {"done": number})


Tools = tuple[str, ...]


def lines(keys: str, start: int = 0, batch: int = 0, tools: Tools = ("terminal",)) -> list[tuple[int, bytes]]:
    return [(batch, entry_line(key, start + i, tools)) for i, key in enumerate(keys)]


def as_read(run_dir: Path) -> RunIndex:
    """The scan of a copy of the run directory without its records files: every line read."""
    copy = run_dir.parent / f"{run_dir.name}-read"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns(".*.records"))
    return scan_run(copy)


def same_scan(a: RunIndex, b: RunIndex) -> None:
    assert (a.done, a.discarded, a.indices, a.tombstoned, a.labels, a.results, a.invalid_lines) == (
        b.done,
        b.discarded,
        b.indices,
        b.tombstoned,
        b.labels,
        b.results,
        b.invalid_lines,
    )


def test_a_resume_loads_the_saved_records_and_records_the_lines_after_them(tmp_path: Path) -> None:
    run = tmp_path / "run"
    both = ("web_search", "terminal")
    first = lines("abcde") + lines("fgh", start=100, batch=1, tools=both) + lines("ij", start=5)
    invocation(run, first, checkpoint_after=8)  # i and j come after the last checkpoint
    assert records_path(run / "batch_0.jsonl").is_file() and records_path(run / "batch_1.jsonl").is_file()

    with opened(run) as store:
        shard = store.records.of(run / "batch_0.jsonl")
        assert shard is not None and shard.base == 0 and shard.count == 7  # 5 saved, 2 parsed after them
        assert shard.start == shard.end == (run / "batch_0.jsonl").stat().st_size
        assert [line.key for line in shard.lines] == list("abcdeij")
        assert [line.tools for line in store.records.of(run / "batch_1.jsonl").lines] == [
            ("web_search", "terminal")
        ] * 3
        same_scan(store.scan(), as_read(run))

        store.append_result(0, entry_line("k", 7))
        assert [line.key for _entry, line in store.take_appended()] == ["k"]
        counted: list[str] = []
        merged = store.merge(TOOLS, lambda e: counted.append(e["metadata"]["prompt_key"]), counted=True)
        store.write_json("checkpoint.json", {})
    # the loaded lines are an earlier invocation's: counted by the merge, the new one is not
    assert sorted(counted) == sorted("abcdefghij") and merged.written == 11
    plain = merge_run(shutil.copytree(run, tmp_path / "plain", ignore=shutil.ignore_patterns(".*")), TOOLS)
    assert plain.written == 11
    output = (run / "trajectories.jsonl").read_bytes()
    assert output == (tmp_path / "plain" / "trajectories.jsonl").read_bytes()

    with opened(run) as again:  # the third invocation loads what the second saved: i, j and k included
        assert [line.key for line in again.records.of(run / "batch_0.jsonl").lines] == list("abcdeijk")
        same_scan(again.scan(), as_read(run))


def test_the_ends_unnumbered_scan_is_the_scan_without_its_numbers(tmp_path: Path) -> None:
    run = tmp_path / "run"
    written = lines("abcde") + lines("fgh", start=100, batch=1) + lines("ij", start=5)
    invocation(run, written, checkpoint_after=8)
    (run / "failures.jsonl").write_text(json.dumps({"prompt_key": "z", "prompt_index": 40}) + "\n")
    with opened(run) as store:  # the recorded lines, and those after the last checkpoint read
        numbered, bare = store.scan(), store.scan(numbered=False)
        assert numbered.indices["z"] == 40 and numbered.indices["f"] == 100
        assert bare.indices == {} and replace(bare, numbered=True) == replace(numbered, indices={})
    read, bare_read = scan_run(run), scan_run(run, numbered=False)  # every line read
    assert bare_read.indices == {} and replace(bare_read, numbered=True) == replace(read, indices={})


def test_a_line_edited_in_place_is_caught_by_the_merge_and_the_records_are_dropped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    invocation(run, lines("abcde"), checkpoint_after=5)
    shard = run / "batch_0.jsonl"
    data = shard.read_bytes()
    with shard.open("r+b") as handle:  # the same size and inode: the middle line's key changed
        handle.seek(data.index(b'"prompt_key": "c"'))
        handle.write(b'"prompt_key": "x"')

    with opened(run) as store:
        assert "c" in store.scan().done  # the first and last lines match: the records are loaded
        with pytest.raises(ShardChanged):
            store.merge(TOOLS, None, counted=True)
        store.forget_records()  # what EndFold does: recount from the files
        assert not records_path(shard).exists()
        assert store.scan().done == set("abxde")
        assert store.merge(TOOLS, None).written == 5
    same_scan(opened_scan(run), as_read(run))


def opened_scan(run_dir: Path) -> RunIndex:
    with opened(run_dir) as store:
        return store.scan()


def _replace(shard: Path) -> None:
    temp = shard.with_name("temp")
    temp.write_bytes(shard.read_bytes())
    os.replace(temp, shard)  # the same bytes, another inode: what an atomic rewrite leaves


def _cut(shard: Path) -> None:
    data = shard.read_bytes()
    shard.write_bytes(data[: data.index(b"\n") + 1])


def _hand_written(shard: Path) -> None:
    with shard.open("ab") as handle:
        handle.write(json.dumps({"conversations": [{"from": "human", "value": "a"}]}).encode() + b"\n")


def _no_such_shard(shard: Path) -> None:
    shard.unlink()


def changed_run(tmp_path: Path, change: Callable[[Path], None]) -> tuple[Path, Path]:
    """A run of two shards whose records are saved, then `batch_0.jsonl` changed by `change`."""
    run = tmp_path / "run"
    invocation(run, lines("abcd") + lines("ef", start=10, batch=1), checkpoint_after=6)
    change(run / "batch_0.jsonl")
    return run, run / "batch_0.jsonl"


@pytest.mark.parametrize("change", [_replace, _cut])
def test_records_that_no_longer_describe_the_shard_are_made_again_from_it(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    run, shard = changed_run(tmp_path, change)
    assert records_path(shard).exists()
    with opened(run) as store:
        remade = store.records.of(shard)
        assert remade is not None and remade.saved == 0  # parsed whole: the saved ones refused
        assert [line.key for line in remade.lines] == [
            e["metadata"]["prompt_key"] for _l, e in read_lines(shard)
        ]
        assert not records_path(shard).exists()
        assert store.records.of(run / "batch_1.jsonl").saved == 2  # the other shard's are fine
        same_scan(store.scan(), as_read(run))
        store.write_json("checkpoint.json", {})
    assert opened_scan_saved(run, shard) == remade.count  # saved again, loaded next time


def opened_scan_saved(run_dir: Path, shard: Path) -> int:
    with opened(run_dir) as store:
        same_scan(store.scan(), as_read(run_dir))
        loaded = store.records.of(shard)
        assert loaded is not None
        return loaded.saved


def test_a_shard_written_after_the_last_save_is_parsed_once_then_saved(tmp_path: Path) -> None:
    run = tmp_path / "run"
    invocation(run, lines("ab") + lines("cd", start=10, batch=1), checkpoint_after=2)  # killed
    assert not records_path(run / "batch_1.jsonl").exists()
    with opened(run) as store:
        assert store.records.of(run / "batch_1.jsonl").count == 2
        store.write_json("checkpoint.json", {})
    assert opened_scan_saved(run, run / "batch_1.jsonl") == 2


@pytest.mark.parametrize("change", [_hand_written, _no_such_shard])
def test_a_shard_the_runner_did_not_write_whole_is_read_at_every_scan(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    run, shard = changed_run(tmp_path, change)
    with opened(run) as store:
        assert store.records.of(shard) is None and not records_path(shard).exists()
        assert store.records.of(run / "batch_1.jsonl") is not None
        same_scan(store.scan(), as_read(run))


def test_a_torn_block_is_cut_off_and_the_good_blocks_before_it_are_loaded(tmp_path: Path) -> None:
    run = tmp_path / "run"
    invocation(run, lines("abc"), checkpoint_after=3)
    invocation(run, lines("de", start=3), checkpoint_after=2)  # a second block
    saved = records_path(run / "batch_0.jsonl")
    size = saved.stat().st_size
    with saved.open("r+b") as handle:
        handle.seek(size - 3)
        handle.write(b"\xff\xff\xff")  # the second block's CRC no longer holds
    with opened(run) as store:
        shard = store.records.of(run / "batch_0.jsonl")
        assert shard is not None and [line.key for line in shard.lines] == list("abcde")  # d, e parsed
        assert shard.saved == 3 and saved.stat().st_size < size
        store.write_json("checkpoint.json", {})  # d and e saved again, after the good block
    with opened(run) as store:
        assert store.records.of(run / "batch_0.jsonl").saved == 5
        same_scan(store.scan(), as_read(run))


def test_a_line_that_cannot_be_recorded_removes_every_records_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    invocation(run, lines("ab") + lines("c", start=50, batch=1), checkpoint_after=3)
    assert len(list(run.glob(".*.records"))) == 2
    with opened(run) as store:
        store.append_result(0, {"conversations": [{"from": "human", "value": "no key"}]})
        store.write_json("checkpoint.json", {})
    assert list(run.glob(".*.records")) == []
    same_scan(opened_scan(run), as_read(run))


def test_every_invocation_numbers_the_tool_names_as_the_run_did(tmp_path: Path) -> None:
    run = tmp_path / "run"
    invocation(run, lines("ab", tools=("terminal",)), checkpoint_after=2)
    invocation(run, lines("cd", start=20, batch=1, tools=("web_search",)), checkpoint_after=2)
    with opened(run) as store:
        tools = {line.key: line.tools for shard in store.records.shards.values() for line in shard.lines}
        assert tools == {"a": ("terminal",), "b": ("terminal",), "c": ("web_search",), "d": ("web_search",)}
        assert all(shard.saved == 2 for shard in store.records.shards.values())
        store.append_result(0, entry_line("e", 2, ("web_search", "terminal")))
        store.take_appended()
        assert store.merge(TOOLS, None, counted=True).written == 5
    got = [sorted(entry["tool_stats"]) for _line, entry in read_lines(run / "trajectories.jsonl")]
    assert got == [["terminal"], ["terminal"], ["terminal", "web_search"], ["web_search"], ["web_search"]]


def test_without_the_table_of_names_the_blocks_are_refused_and_the_shards_parsed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    invocation(run, lines("ab", tools=("terminal",)) + lines("cd", start=20, batch=1), checkpoint_after=4)
    (run / NAMES_FILE).unlink()
    with opened(run) as store:
        assert all(shard.saved == 0 and shard.count == 2 for shard in store.records.shards.values())
        same_scan(store.scan(), as_read(run))


def test_a_table_of_names_edited_since_refuses_the_blocks_that_use_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    invocation(
        run,
        lines("ab", tools=("terminal",)) + lines("cd", start=20, batch=1, tools=("web_search",)),
        checkpoint_after=4,
    )
    table = json.loads((run / NAMES_FILE).read_text())
    (run / NAMES_FILE).write_text(json.dumps(table[::-1]))  # the same names, the ids swapped
    with opened(run) as store:
        assert all(shard.saved == 0 and shard.count == 2 for shard in store.records.shards.values())
        tools = {line.key: line.tools for shard in store.records.shards.values() for line in shard.lines}
        assert tools == {"a": ("terminal",), "b": ("terminal",), "c": ("web_search",), "d": ("web_search",)}
        same_scan(store.scan(), as_read(run))


def test_shards_rewritten_after_the_records_were_loaded_are_loaded_again_at_the_next_repair(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    invocation(run, lines("abc"), checkpoint_after=3)
    with opened(run) as store:  # --rescore: repair, then every shard rewritten atomically
        assert store.records.of(run / "batch_0.jsonl").saved == 3
        _replace(run / "batch_0.jsonl")
        store.repair()  # the run's own start
        reloaded = store.records.of(run / "batch_0.jsonl")
        assert store.records.usable and reloaded is not None and reloaded.saved == 0 and reloaded.count == 3
        same_scan(store.scan(), as_read(run))


def test_the_scan_of_recorded_lines_matches_reading_them_tombstones_labels_and_all(tmp_path: Path) -> None:
    def labelled(key: str, index: int, reasons: list[str]) -> bytes:
        entry = json.loads(entry_line(key, index))
        entry["metadata"]["discard_reasons"] = reasons
        return (json.dumps(entry) + "\n").encode()

    def tombstone(key: str, index: int) -> bytes:
        return (
            json.dumps({"prompt_index": index, "discarded": True, "metadata": {"prompt_key": key}}) + "\n"
        ).encode()

    run = tmp_path / "run"
    appends = [(0, labelled("a", 0, ["too_short"])), (0, labelled("a", 0, ["other"])), (0, tombstone("b", 1))]
    appends += [
        (0, entry_line("c", 2)),
        (0, tombstone("c", 2)),
        (0, labelled("c", 2, ["late"])),
    ]  # back again
    appends += [(1, tombstone("d", 10)), (1, entry_line("e", 11)), (1, labelled("f", -1, []))]  # f: no index
    with opened(run) as store:
        for batch, line in appends:
            store.append_result(batch, line)
        found = store.scan()
        same_scan(found, as_read(run))
    assert found.labels == {"a": ["too_short"], "c": ["late"]} and found.tombstoned == {"b", "d"}
    assert found.done == {"a", "c", "e", "f"} and found.results == 6 and "f" not in found.indices

    # the end's scans: the merged keys left out of `done`, or every result key (tombstones alone)
    (run / "failures.jsonl").write_text("".join(json.dumps({"prompt_key": k}) + "\n" for k in "ag"))
    with opened(run) as store:
        for scanned in (store.scan(known=KeySet({"a", "e"})), scan_run(run, known=KeySet({"a", "e"}))):
            assert scanned.done == {"c", "f"} and scanned.tombstoned == {"b", "d"}
            assert scanned.failures == {"g": 1} and scanned.labels == found.labels
        for scanned in (store.scan(numbered=False, known=EVERY_KEY), scan_run(run, known=EVERY_KEY)):
            assert scanned.done == set() and scanned.tombstoned == {"b", "d"} and scanned.results == 6


def test_the_scan_for_tombstones_alone_passes_over_plain_shards_yet_sees_a_key_come_back(
    tmp_path: Path,
) -> None:
    """The end's scan for tombstones (`known=EVERY_KEY`) does not decode the keys of a recorded
    shard with no tombstone or label, but only while no tombstone is noted: c's result line in
    batch_2 (written after a --batch_size change) undoes its tombstone in batch_1."""
    run = tmp_path / "run"
    withdrawn = {"prompt_index": 5, "discarded": True, "metadata": {"prompt_key": "c"}}
    appends = [(0, entry_line("a", 0)), (0, entry_line("b", 1)), (1, (json.dumps(withdrawn) + "\n").encode())]
    appends += [(2, entry_line("c", 5)), (3, entry_line("d", 15))]
    with opened(run) as store:
        for batch, line in appends:
            store.append_result(batch, line)
    copy = tmp_path / "read"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".*.records"))
    with opened(run) as store:
        recorded = store.scan(numbered=False, known=EVERY_KEY)
    read = scan_run(copy, numbered=False, known=EVERY_KEY)
    assert recorded.tombstoned == read.tombstoned == set() and recorded.results == read.results == 4
    assert recorded.labels == read.labels == {} and recorded.done == read.done == set()
