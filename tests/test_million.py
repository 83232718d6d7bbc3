"""A million prompts with the parent's memory flat (issue 26): each per-prompt structure the
parent keeps is packed, and gives the same answers as the objects it replaced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.batch.tally import IndexSet, RunTally
from agent.store.directory import RunDirectory
from agent.store.figures import EntryFigures, FiguresTable
from agent.store.jsonl import read_lines
from agent.store.shard_index import line_of


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
    with RunDirectory(tmp_path) as store:
        store.lock()
        store.repair()
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
    with RunDirectory(tmp_path) as store:
        store.lock()
        store.repair()
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
