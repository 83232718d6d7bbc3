"""A resume counts the lines earlier invocations wrote while it runs (`agent.store.earlier_lines`,
`EndFold.answered`), so its end neither parses nor counts them (issue 26): handed out in the
merge's order, a few per answer; a shard whose lines are all counted is copied unparsed; a shard
the end must judge line by line (a tombstone, a tool the registry lacks) is left to it; a line
changed since it was recorded makes the end count everything from the files. A backlog of files
to merge ahead (those after the earlier ones) is copied a few files an event."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from agent.batch.end_fold import AHEAD_PER_CALL, EARLY_PER_ANSWER, EndFold
from agent.batch.tally import RunTally
from agent.store.earlier_lines import EarlierLines
from agent.store.merge import merge_run
from agent.store.merge_ahead import MergeAhead
from agent.store.shard_index import ShardChanged
from tests.support.run_dirs import opened
from tests.support.scripted_backend import scripted_config
from tests.test_end_of_run import entry_line, output_sections, recounted
from tests.test_saved_records import TOOLS, invocation, lines


def keys(entries: list[dict[str, object]]) -> str:
    return "".join(str(entry["metadata"]["prompt_key"]) for entry in entries)  # type: ignore[index]


def tombstone(key: str, index: int) -> bytes:
    record = {"prompt_key": key, "prompt_index": index, "discarded": True, "metadata": {"prompt_key": key}}
    return (json.dumps(record) + "\n").encode()


def first_run(run: Path) -> None:
    """batch_0: a b c d e (e after the last checkpoint: parsed at the resume); batch_1: f g h."""
    invocation(run, lines("abcd") + lines("fgh", start=5, batch=1) + lines("e", start=4), checkpoint_after=7)


def test_earlier_lines_are_handed_out_in_the_merges_order_and_their_shards_then_copied_unparsed(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    first_run(run)
    with opened(run) as store:
        store.append_result(1, entry_line("i", 8, ("terminal",)))  # this invocation's, after f g h
        store.take_appended()
        earlier = EarlierLines(run, store.records, TOOLS)
        assert earlier.left == 8
        assert keys(earlier.take(3)) == "abc" and earlier.waiting("batch_0.jsonl")
        assert keys(earlier.take(3)) == "def"  # batch_0 in file order, then batch_1
        assert not earlier.waiting("batch_0.jsonl") and earlier.waiting("batch_1.jsonl")
        assert store.records.of(run / "batch_0.jsonl").start == 0  # type: ignore[union-attr]
        assert keys(earlier.take(10)) == "gh" and earlier.left == 0 and earlier.take(10) == []
        counted: list[str] = []
        merged = store.merge(TOOLS, lambda e: counted.append(e["metadata"]["prompt_key"]), counted=True)
    assert counted == [] and merged.written == 9  # every line counted before: none parsed to count
    plain = merge_run(shutil.copytree(run, tmp_path / "plain", ignore=shutil.ignore_patterns(".*")), TOOLS)
    assert plain.written == 9
    output = (run / "trajectories.jsonl").read_bytes()
    assert output == (tmp_path / "plain" / "trajectories.jsonl").read_bytes()


@pytest.mark.parametrize("odd", ["tombstone", "unknown tool"])
def test_a_shard_the_merge_must_judge_line_by_line_is_left_to_the_end(tmp_path: Path, odd: str) -> None:
    run = tmp_path / "run"
    if odd == "tombstone":
        strange = [(0, entry_line("x", 2, ("terminal",))), (0, tombstone("x", 2))]
    else:
        strange = [(0, entry_line("x", 2, ("invented",)))]
    invocation(run, lines("ab") + strange + lines("fg", start=5, batch=1), checkpoint_after=9)
    with opened(run) as store:
        earlier = EarlierLines(run, store.records, TOOLS)
        assert keys(earlier.take(10)) == "fg" and earlier.left == 0
        assert not earlier.waiting("batch_0.jsonl")
        assert store.records.of(run / "batch_0.jsonl").start > 0  # type: ignore[union-attr]
        counted: list[str] = []
        withdrawn = store.scan().tombstoned  # as the run hands them to the merge
        merged = store.merge(
            TOOLS, lambda e: counted.append(e["metadata"]["prompt_key"]), exclude=withdrawn, counted=True
        )
    # the end parses batch_0 as before: the withdrawn line is not counted, the unknown one labelled
    assert counted == (["a", "b"] if odd == "tombstone" else ["a", "b", "x"])
    assert merged.labelled == (odd == "unknown tool") and merged.counted_left_out == 0


def test_a_line_changed_since_it_was_recorded_stops_the_handing_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first_run(run)
    shard = run / "batch_1.jsonl"
    with opened(run) as store:
        data = shard.read_bytes()
        shard.write_bytes(data.replace(b'"prompt_key": "g"', b'"prompt_key": "G"'))  # the same size
        earlier = EarlierLines(run, store.records, TOOLS)
        assert keys(earlier.take(5)) == "abcde"
        with pytest.raises(ShardChanged, match=r"batch_1\.jsonl"):
            earlier.take(5)
        assert earlier.take(5) == []


def test_records_forgotten_midway_leave_nothing_to_hand_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first_run(run)
    with opened(run) as store:
        earlier = EarlierLines(run, store.records, TOOLS)
        assert keys(earlier.take(2)) == "ab"
        store.forget_records()  # a line that could not be recorded: the end counts from the files
        assert earlier.take(10) == [] and earlier.left == 0
        assert not earlier.waiting("batch_0.jsonl") and not earlier.waiting("batch_1.jsonl")


def test_the_earlier_lines_are_spread_over_the_answers_and_counted_as_a_recount_counts_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = scripted_config(tmp_path, ["p"], "unused")
    for change in (False, True):
        run = tmp_path / f"run-{change}"
        first_run(run)
        tally = RunTally(5)
        fold = EndFold(run, tally)
        with opened(run) as store:
            fold.count_earlier(store, answers=16)
            left = []
            for _answer in range(6):
                if change:  # a line of batch_1 edited in place once the resume has begun
                    data = (run / "batch_1.jsonl").read_bytes()
                    (run / "batch_1.jsonl").write_bytes(data.replace(b'"g"', b'"G"'))
                fold.answered(store)
                left.append(fold._earlier.left if fold._earlier is not None else None)
            # 8 lines counted by the first quarter of 16 answers: 2, 2, 2, 1, 1 (g changed: none more)
            assert left == ([6, 4, 2, None, None, None] if change else [6, 4, 2, 1, 0, 0])
            assert store.records.usable is not change
            fold.merge(config, store, set())
            store.write_json("statistics.json", tally.stats.to_dict(**_names()))
        stats = json.loads((run / "statistics.json").read_text())
        assert stats["trajectories"]["entries"] == 8
        assert output_sections(stats) == recounted(run)
    warned = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert any("counted again from the files" in message for message in warned)


def _names() -> dict[str, object]:
    names = ("run_name", "distribution", "model", "total_prompts", "batch_size", "total_batches")
    return {**dict.fromkeys(names[:3], ""), **dict.fromkeys(names[3:], 1), "duration_seconds": 1.0}


def test_a_backlog_of_batch_files_is_merged_ahead_a_few_files_an_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copied: list[str] = []
    real = MergeAhead.add

    def counting(ahead: MergeAhead, path: Path, *rest):  # type: ignore[no-untyped-def]
        copied.append(path.name)
        return real(ahead, path, *rest)

    monkeypatch.setattr(MergeAhead, "add", counting)
    run, tally = tmp_path / "run", RunTally(1)
    with opened(run) as store:
        for number, key in enumerate("abcdef"):  # six batches of one, all answered
            tally.plan(number, done=True)
            store.append_result(number, entry_line(key, number, ("terminal",)))
        fold = EndFold(run, tally, ahead=True)
        fold.take(store)
        per_event = []
        for _event in range(3):
            fold.merge_ahead(store)
            per_event.append(len(copied))
        assert per_event == [AHEAD_PER_CALL, 6, 6] and AHEAD_PER_CALL == 4
        assert fold.merge(scripted_config(tmp_path, ["p"], "unused"), store, set()).ahead_files == 6
    assert copied == [f"batch_{number}.jsonl" for number in range(6)]


def test_the_lines_the_answers_left_uncounted_are_counted_at_the_end_each_once(tmp_path: Path) -> None:
    """Fewer answers than planned (--max_cost, a crash loop) leave a shard partly counted, and an
    answer never counts more than EARLY_PER_ANSWER (a resume of a few prompts of a big run)."""
    config = scripted_config(tmp_path, ["p"], "unused")
    cases = {"one of 16 answers": (first_run, 16, 6), "one answer, 100 lines": (hundred_lines, 1, 36)}
    for name, (write, answers, left) in cases.items():
        run, tally = tmp_path / name, RunTally(5)
        write(run)
        fold = EndFold(run, tally)
        with opened(run) as store:
            fold.count_earlier(store, answers=answers)
            fold.answered(store)
            assert fold._earlier is not None and fold._earlier.left == left
            fold.merge(config, store, set())
            store.write_json("statistics.json", tally.stats.to_dict(**_names()))
        stats = json.loads((run / "statistics.json").read_text())
        assert output_sections(stats) == recounted(run), name
        assert stats["trajectories"]["entries"] == len((run / "trajectories.jsonl").read_bytes().splitlines())


def hundred_lines(run: Path) -> None:
    appends = [(i // 50, entry_line(f"k{i}", i, ("terminal",))) for i in range(100)]
    invocation(run, appends, checkpoint_after=100)
    assert EARLY_PER_ANSWER == 64
