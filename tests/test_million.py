"""A million prompts with the parent's memory flat (issue 26): each per-prompt structure the
parent keeps is packed, and gives the same answers as the objects it replaced."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from agent.batch.completion import Completion
from agent.batch.dataset import keyed_units
from agent.batch.dataset_copies import CopyCounter, RowKeys
from agent.batch.planned import PlannedKeys, PlannedUnits, Unit
from agent.batch.tally import IndexSet, Paced, RunTally
from agent.store import jsonl, line_head
from agent.store.figures import EntryFigures, FiguresTable
from agent.store.index import RunIndex, scan_run
from agent.store.jsonl import raw_lines, read_lines
from agent.store.key_book import KeySet
from agent.store.keys import prompt_hash
from agent.store.line_head import head, index_prefix
from agent.store.shard_index import line_of
from tests.support.run_dirs import opened
from tests.support.scripted_backend import run_scripted, scripted_config


def entry(key: str, index: int | None, **fields: Any) -> dict[str, Any]:
    made: dict[str, Any] = {
        "conversations": [{"from": "human", "value": key}],
        "metadata": {"prompt_key": key},
    }
    if index is not None:
        made["prompt_index"] = index
    return {**made, **fields}


ENTRIES = [
    entry("k:0", 3, tool_stats={"terminal": {"count": 1}, "web_search": {"count": 0}}),
    entry("k:1", None),  # no prompt_index: the merge sorts it first
    entry("ключ:0", 7, metadata={"prompt_key": "ключ:0", "discard_reasons": ["too_short"]}),
    {"prompt_key": "k:0", "discarded": True, "prompt": "k", "metadata": {"prompt_key": "k:0"}},  # tombstone
    entry("k:2#1", 2**40, tool_stats={"terminal": {"count": 2}, "web_search": {"count": 1}}),
]


def test_packed_shard_records_give_back_the_lines_as_line_of_makes_them(tmp_path: Path) -> None:
    with opened(tmp_path) as store:
        for number, made in enumerate(ENTRIES):
            store.append_result(number % 2, json.dumps(made).encode() + b"\n")
        for name in ("batch_0.jsonl", "batch_1.jsonl"):
            expected, offset = [], 0
            for raw in (tmp_path / name).read_bytes().splitlines(keepends=True):
                expected.append(line_of(offset, raw, json.loads(raw)))
                offset += len(raw)
            shard = store.records.of(tmp_path / name)
            assert shard is not None and list(shard.lines) == expected
            # packed: a few dozen bytes a line, no object per line (a NamedTuple was ~300 B)
            assert len(shard.rows) + len(shard.keys) < 64 * len(expected)
        assert [line.tombstone for _, line in store.take_appended()] == [False, False, False, True, False]


def test_the_scan_and_merge_of_packed_records_match_a_fresh_read(tmp_path: Path) -> None:
    """What the scan and the merge make of this process's records is what they make of the files."""
    with opened(tmp_path) as store:
        for number, made in enumerate([*ENTRIES, entry("k:0", 3)]):
            store.append_result(number % 2, json.dumps(made).encode() + b"\n")
        packed = store.scan()
        store.merge({"terminal"}, output="packed.jsonl")
        store.forget_records()
        read = store.scan()
        store.merge({"terminal"}, output="read.jsonl")
    assert packed == read
    assert (tmp_path / "packed.jsonl").read_bytes() == (tmp_path / "read.jsonl").read_bytes()
    merged = [e["metadata"]["prompt_key"] for _, e in read_lines(tmp_path / "read.jsonl") if e]
    assert merged == ["k:0", "ключ:0", "k:2#1", "k:1"]  # by prompt_index per shard, first line wins


def test_the_done_indices_are_one_byte_a_prompt_and_answer_as_a_set() -> None:
    done, reference = IndexSet(), set()
    for index in [5, 0, 5, 1_000, 3, 999_999, 17]:
        done.add(index)
        reference.add(index)
    assert done.sorted() == sorted(reference) and len(done) == len(reference)
    assert all((n in done) == (n in reference) for n in [-1, 0, 1, 4, 5, 1_000, 999_998, 999_999, 10**7])
    assert len(done._marks) < 2 * 1_000_000  # bytes, not objects
    with pytest.raises(ValueError, match="never negative"):
        done.add(-1)


def test_checkpoint_lists_done_prompts_from_the_packed_set() -> None:
    tally = RunTally(batch_size=10)
    for index, done in [(12, True), (3, False), (0, True), (7, True)]:
        tally.plan(index, done=done)
    assert tally.checkpoint("r")["completed_prompts"] == [0, 7, 12]
    assert isinstance(tally.done_indices, IndexSet)


@pytest.mark.parametrize("data", [{}, {"run_name": "r ü", "batch_stats": {"0": {"total": 3}}}])
@pytest.mark.parametrize("values", [[], [0], list(range(7)), [3, 10**12]])
def test_a_document_with_its_long_list_written_in_chunks_is_the_same_json(
    data: dict[str, Any], values: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl, "LIST_CHUNK", 3)  # chunk boundaries inside the list
    text = b"".join(jsonl.document_pieces(data, ("completed_prompts", iter(values))))
    assert json.loads(text) == {**data, "completed_prompts": values} and text.endswith(b"}\n")
    assert (
        b"".join(jsonl.document_pieces(data))
        == (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()
    )
    with pytest.raises(ValueError):  # encoded before anything is written
        jsonl.document_pieces({"x": float("nan")}, ("completed_prompts", iter(values)))


def test_checkpoint_json_lists_the_done_prompts_written_a_chunk_at_a_time(tmp_path: Path) -> None:
    tally = RunTally(batch_size=10)
    for index in [12, 3, 0, 10**12]:
        tally.plan(index, done=index != 3)
    with opened(tmp_path / "run") as store:
        store.write_json(
            "checkpoint.json", tally.checkpoint("r", listed=False), ("completed_prompts", tally.done_indices)
        )
    written = json.loads((tmp_path / "run" / "checkpoint.json").read_text())
    assert written == {**tally.checkpoint("r"), "last_updated": written["last_updated"]}


def test_the_packed_figures_table_answers_as_the_dict_it_replaced() -> None:
    table, reference = FiguresTable(), {}
    rows = [
        ("a:0", 0, EntryFigures(True, False, 1, "completed", {"prompt_tokens": 10, "cost_usd": 0.25})),
        ("b:0", 7, EntryFigures(False, True, 3, "max_turns", None)),
        ("ключ:0#2", 3, EntryFigures(True, False, 0, "completed", {"details": {"cached": 2}})),
        ("a:0", 0, EntryFigures(False, False, 2, "error", {})),  # written again: the last counts
    ]
    for key, index, figures in rows:
        table.put(key, index, figures)
        reference[key] = figures
    assert len(table) == len(reference) == 3
    assert sorted(table) == sorted(reference)
    for key, index, _ in rows:
        assert table.get(key, index) == reference[key]
    assert table.get("a:0", 7) is None and table.get("a:0", 99) is None and table.get("a:0", None) is None
    assert table.get("a:0", True) is None  # a bool is not a prompt_index
    assert table.get("b:0", 0) is None  # the row put last is at 0, but it is a:0's


@pytest.mark.parametrize("spill_bytes", [1, 200, 1 << 20])
def test_the_figures_table_spilled_to_its_file_answers_as_a_dict(tmp_path: Path, spill_bytes: int) -> None:
    rng = random.Random(spill_bytes)
    table, reference = FiguresTable(tmp_path, spill_bytes), {}
    for step in range(3000):
        index = rng.choice([rng.randrange(400), 10**12 + rng.randrange(3)])  # replaced, far
        key = f"k{index}ü:{rng.randrange(2)}"
        usage = {"prompt_tokens": step, "note": "x" * rng.choice([0, 10, 400])} if step % 3 else None
        figures = EntryFigures(step % 2 == 0, step % 5 == 0, step, rng.choice(["completed", "错"]), usage)
        table.put(key, index, figures)
        reference[index] = (key, figures)
        if step % 7 == 0:  # one put earlier: read back from the file
            earlier = rng.choice(list(reference))
            assert table.get(reference[earlier][0], earlier) == reference[earlier][1]
    assert len(table) == len(reference) and sorted(table) == sorted(k for k, _ in reference.values())
    for index, (key, figures) in reference.items():
        assert table.get(key, index) == figures and table.get(key + "x", index) is None
    assert len(table._rows) < max(spill_bytes, 1024)  # the rows are in the file, not held
    assert list(tmp_path.iterdir()) == []  # the file has no name: nothing left behind


def test_the_figures_table_keeps_its_rows_when_its_file_cannot_be_made(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table, figures = FiguresTable(tmp_path / "gone", spill_bytes=1), EntryFigures(True, False, 1, "done", {})
    for index in range(3):
        table.put(f"{index}:0", index, figures)
    assert [table.get(f"{index}:0", index) for index in range(3)] == [figures] * 3
    assert sorted(table) == ["0:0", "1:0", "2:0"]
    assert caplog.text.count("the run's figures stay in memory") == 1


def scripted_run_dir(tmp_path: Path, prompts: int = 6) -> Path:
    """A run's directory as the runner writes it (the scripted backend: real entries, no model)."""
    texts = [f'prompt {i} "quoted" ü {{"metadata": {{}}}}' for i in range(prompts)]
    config = scripted_config(tmp_path, texts, "heads")
    run_scripted(config)
    return config.run_dir


def test_the_scan_reads_the_runners_lines_by_their_head_and_finds_what_a_full_parse_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = scripted_run_dir(tmp_path)
    lines = [line for path in sorted(run_dir.glob("batch_*.jsonl")) for line, _ in read_lines(path)]
    assert len(lines) == 6
    for line in lines:  # every line the runner wrote is read by its head, as a full parse reads it
        full, read = json.loads(line), head(line)
        assert read is not None and read["metadata"] == full["metadata"]
        assert read["prompt_index"] == full["prompt_index"] == index_prefix(line)
    with (run_dir / "batch_9.jsonl").open("ab") as handle:  # lines the head must not read
        for made in TRICKY:
            handle.write(made + b"\n")
    fast = scan_run(run_dir)
    monkeypatch.setattr(line_head, "head", lambda line: None)
    assert scan_run(run_dir) == fast and fast.invalid_lines == 1
    assert fast.indices["k:9"] == 9 and "k:9" in fast.done and "nested:0" not in fast.done


TRICKY = [
    # no prompt_key in metadata: its key comes from the turns' text
    b'{"prompt_index": 7, "conversations": [{"from": "human", "value": "hi"}], "metadata": {"x": 1}}',
    # a second "metadata" (nested, after the turns): parsed whole, the top level's key wins
    b'{"prompt_index": 8, "conversations": [{"from": "human", "value": "a"}], "metadata": {"prompt_key":'
    b' "k:8"}, "extra": {"metadata": {"prompt_key": "nested:0"}}}',
    # the turns end on a non-string: not the runner's layout
    b'{"prompt_index": 9, "conversations": [{"from": "human", "value": "b", "n": 1}], "metadata":'
    b' {"prompt_key": "k:9", "discard_reasons": ["too_short"]}}',
    b'{"prompt_index": 10, "conversations": [{"from": "human", "value": "c"}], "metadata": {"prompt_key":',
]


def test_the_packed_copy_counter_numbers_repeats_as_the_dict_it_replaced() -> None:
    digests = [prompt_hash(f"prompt {n % 700}") for n in range(3000)] + ["00" * 10, "00" * 10]
    counter, reference = CopyCounter(slots=8), dict[str, int]()  # 8 slots: it grows many times
    for digest in digests:
        expected = reference.get(digest, 0)
        reference[digest] = expected + 1
        assert counter.see(digest) == expected
    assert len(counter._table) <= 4 * 10 * 700 * 2  # ten bytes a distinct prompt, half full at least
    with pytest.raises(ValueError, match="not a prompt hash"):
        counter.see("abc1")


def test_the_planned_units_are_the_row_keys_times_the_samples() -> None:
    rows = RowKeys()
    for digest, copy in (("ab" * 10, 0), ("cd" * 10, 0), ("ab" * 10, 1)):
        rows.append(digest, copy)
    one, three = PlannedUnits(rows), PlannedUnits(rows, 3)
    assert list(one) == [
        Unit(f"{'ab' * 10}:0", 0, 0),
        Unit(f"{'cd' * 10}:0", 1, 0),
        Unit(f"{'ab' * 10}:1", 2, 0),
    ]
    assert list(one) == list(one) and len(one) == 3  # iterated again: nothing is consumed
    assert [unit.key for unit in three][:4] == [
        f"{'ab' * 10}:0",
        f"{'ab' * 10}:0#1",
        f"{'ab' * 10}:0#2",
        f"{'cd' * 10}:0",
    ]
    assert [(u.index, u.sample_index) for u in three][-3:] == [(6, 0), (7, 1), (8, 2)] and len(three) == 9
    assert [three.key(i) for i in range(9)] == [unit.key for unit in three]
    assert list(keyed_units(rows, 3)) == [(unit.key, unit.index, unit.sample_index) for unit in three]


def planned_index(planned: PlannedUnits, key: str) -> int:
    return next(unit.index for unit in planned if unit.key == key)


def test_the_completion_of_the_planned_units_is_the_split_of_the_units_one_by_one() -> None:
    """`Completion.of` walks PlannedUnits as tuples, every other iterable as rows: the same split."""
    rows = RowKeys()
    for n in range(12):
        rows.append(f"{n:02d}" * 10, 0)
    for samples in (1, 3):
        planned = PlannedUnits(rows, samples)
        keys = [unit.key for unit in planned]
        extra = f"{keys[0]}#{samples}"  # a sample beyond --samples_per_prompt, from a larger N
        stored = RunIndex(done={*keys[:6], extra}, discarded={*keys[6:9]})
        failed, cancelled, merged = {keys[9], keys[1]}, {keys[10]}, KeySet([*keys[:5], extra])
        state = {"cancelled": cancelled, "merged": merged, "samples_per_prompt": samples}
        fast, slow = (
            Completion.of(planned, stored, failed, **state),
            Completion.of(list(planned), stored, failed, **state),
        )
        assert fast == slow and fast.extra_samples == 1 and fast.lost == [planned_index(planned, keys[5])]
        # the plan's own book, noted with right, wrong and no indices: the same split, both ways
        book = PlannedKeys(planned)
        for n, key in enumerate([*keys[:5], extra]):
            book.note(key, (planned_index(planned, key) if key != extra else 0, 7, -1)[n % 3])
        assert sorted(book) == sorted(merged) and len(book) == len(merged)
        assert Completion.of(planned, stored, failed, **{**state, "merged": book}) == fast
        assert Completion.of(list(planned), stored, failed, **{**state, "merged": book}) == fast
        assert (fast.valid, fast.prompts, fast.in_output, fast.discarded, fast.failed) == (
            12 * samples,
            12,
            5,
            3,
            1,
        )
        assert len(fast.in_flight) == 1 and len(fast.not_started) == 12 * samples - 11
        # the run's scan leaves the merged keys out of `done` (`scan(known=merged)`): the same split
        known = RunIndex(done=stored.done - merged, discarded=stored.discarded, known=merged)
        assert Completion.of(planned, known, failed, **state) == fast


def test_a_paced_write_takes_at_most_its_share_of_the_time() -> None:
    now = [0.0]
    writes: list[float] = []

    def write() -> None:  # a checkpoint that takes 0.5 s (a million prompts' list)
        writes.append(now[0])
        now[0] += 0.5

    paced, synced = Paced(share=0.05, clock=lambda: now[0]), []
    for _ in range(60):  # a tick a second
        paced.tick(write, lambda: synced.append(now[0]))
        now[0] += 1.0
    assert writes[:2] == [0.0, 10.5]  # the next write 0.5 / 0.05 = 10 s after the last ended
    assert len(writes) == 6 and len(synced) == 54  # every other tick still commits


def test_an_index_far_past_the_others_costs_no_bytes_of_its_value() -> None:
    done = IndexSet()
    for index in [3, 10**12, 2**21, 5]:  # a hand-edited line's index, then one the table reaches
        done.add(index)
    assert len(done._marks) < 2**23 and done.sorted() == [3, 5, 2**21, 10**12] and len(done) == 4
    assert 10**12 in done and 10**12 - 1 not in done


def test_the_figures_table_keeps_a_far_index_without_its_value_in_bytes() -> None:
    table, figures = FiguresTable(), EntryFigures(True, False, 1, "completed", None)
    for key, index in [("a:0", 2), ("far:0", 10**12), ("b:0", 2**21), ("far:0", 10**12)]:
        table.put(key, index, figures)
    assert len(table._at) < 2**23 and len(table) == 3 and sorted(table) == ["a:0", "b:0", "far:0"]
    assert table.get("far:0", 10**12) == figures and table.get("b:0", 2**21) == figures


def _bytes_read() -> int:
    """What this process has read through system calls so far (`rchar`)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"])


def test_a_shard_whose_lines_are_all_in_the_records_is_not_read(tmp_path: Path) -> None:
    # The end of a run scans twice (--keep, completion) with every shard's lines in the records
    # (start 0): reading a first block of each anyway read the whole output twice (180 MB at
    # 20,000 prompts, ~0.5 s a scan).
    shard = tmp_path / "batch_0.jsonl"
    shard.write_bytes(b'{"prompt_index": 0, "pad": "' + b"x" * (4 << 20) + b'"}\n')
    before = _bytes_read()
    assert list(raw_lines(shard, 0)) == []
    assert _bytes_read() - before < 1 << 16
    assert len(list(raw_lines(shard, 1))) == 1  # a line starting before `end` is read whole
