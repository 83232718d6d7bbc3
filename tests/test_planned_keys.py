"""The merge's keys numbered by the run's plan (`agent.batch.planned.PlannedKeys`): the same
answers as a set of the keys, whatever index a key comes with, and the same merge."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from agent.batch.dataset_copies import RowKeys
from agent.batch.planned import PlannedKeys, PlannedUnits
from agent.store.key_book import KeySet
from agent.store.keys import prompt_hash, sample_key, split_key
from agent.store.merge import merge_run
from tests.support.run_dirs import opened
from tests.test_end_of_run import entry_line

TOOLS = {"terminal"}


def plan(prompts: list[str], samples: int) -> PlannedUnits:
    """The units of a dataset of `prompts` (repeated texts numbered as the scan numbers them)."""
    rows, copies = RowKeys(), dict[str, int]()
    for text in prompts:
        digest = prompt_hash(text)
        rows.append(digest, copies.get(digest, 0))
        copies[digest] = copies.get(digest, 0) + 1
    return PlannedUnits(rows, samples)


def unplanned_keys(units: PlannedUnits) -> list[str]:
    """Keys no unit has: another prompt, a copy or a sample beyond the plan's, and texts that
    only look like keys (upper-case hex, a leading zero, no copy number, not hex at all)."""
    first = units.rows.key(0)
    digest = first.partition(":")[0]
    return [
        f"{prompt_hash('not in the dataset')}:0",
        f"{digest}:9",
        sample_key(first, units.samples),
        f"{digest.upper()}:0",
        f"{digest}:00",
        digest,
        f"{'z' * 20}:0",
        "legacy text",
    ]


@pytest.mark.parametrize("samples", [1, 3])
def test_a_plans_book_answers_as_a_set_of_its_keys_whatever_the_index(samples: int) -> None:
    chooser = random.Random(samples)
    units = plan([f"prompt {chooser.randrange(40)}" for _ in range(60)], samples)
    keys = [units.key(i) for i in range(len(units))] + unplanned_keys(units)
    book, reference = PlannedKeys(units), set[str]()
    for _ in range(400):
        key = chooser.choice(keys)
        right = units.index_of(key)
        hint = chooser.choice([right, -1, chooser.randrange(len(units)), len(units) + 5])
        if chooser.random() < 0.5:
            assert book.note(key, hint) == (key not in reference)  # whether it was new
            reference.add(key)
        assert book.has(key, hint) == (key in reference) == (key in book)
    assert sorted(book) == sorted(reference) and len(book) == len(reference)
    assert all(book.at(i) == (units.key(i) in reference) for i in range(len(units)))
    assert book.unplanned == {key for key in reference if units.index_of(key) < 0}


def test_a_key_ending_in_a_mark_and_other_digits_is_a_prompt_id_not_a_sample() -> None:
    """`#²` is digits to str.isdigit, not to int(): such a key (a hand-edited record) is
    sample 0 of itself, and a plan's book answers for it instead of raising."""
    units = plan(["a"], 2)
    assert split_key("x#²") == ("x#²", 0) and split_key("x#2") == ("x", 2)
    book = PlannedKeys(units)
    assert not book.has("x#²", -1) and "x#٣" not in book
    book.note("x#²", 0)
    assert book.has("x#²", 1) and book.unplanned == {"x#²"}


def test_keys_noted_with_their_own_index_never_build_the_plans_table() -> None:
    """A fresh run's lines carry their unit's index: the lookup by text (a table of the whole
    plan, ~1 s at a million rows) is not built for them."""
    units = plan([f"prompt {n}" for n in range(50)], 2)
    book = PlannedKeys(units)
    for index in range(0, len(units), 3):
        book.note(units.key(index), index)
    assert all(book.has(units.key(i), i) == (i % 3 == 0) for i in range(len(units)))
    assert units.rows._rows is None  # the table is what this test is about
    assert units.key(7) not in book and units.rows._rows is not None  # no index: built


def test_a_row_added_after_a_lookup_is_found() -> None:
    rows = RowKeys()
    rows.append(prompt_hash("a"), 0)
    assert rows.row_of(rows.key(0)) == 0 and rows.row_of(f"{prompt_hash('b')}:0") == -1
    rows.append(prompt_hash("b"), 0)
    rows.append(prompt_hash("a"), 1)
    assert [rows.row_of(rows.key(n)) for n in range(3)] == [0, 1, 2]


def legacy_line(text: str) -> bytes:
    """A line another tool wrote: no prompt_key nor prompt_index (keyed by its prompt's text)."""
    entry = {"conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "done"}]}
    return (json.dumps(entry) + "\n").encode()


def test_a_merge_noting_in_the_plans_book_writes_and_counts_as_with_a_set(tmp_path: Path) -> None:
    """Lines with their own index, a wrong one, none (another tool's), duplicates across files,
    keys the plan does not hold: merged through the plan's book (the fast path where it applies),
    the output, the counts and the keys are those of a merge through a set, read line by line."""
    texts = [f"prompt {n % 30}" for n in range(40)]
    units, chooser = plan(texts, 1), random.Random(7)
    run = tmp_path / "run"
    run.mkdir()
    (run / "batch_9.jsonl").write_bytes(b"".join(legacy_line(t) for t in (texts[3], texts[3], "off plan")))
    with opened(run) as store:
        store.note_keys_in(lambda: PlannedKeys(units))
        for _ in range(120):
            index = chooser.randrange(len(units))
            hint = chooser.choice([index, index, -1, chooser.randrange(len(units))])
            key = units.key(index) if chooser.random() < 0.9 else f"{prompt_hash('elsewhere')}:{index}"
            store.append_result(chooser.randrange(4), entry_line(key, hint))
        store.take_appended()
        store.sync()
        shutil.copytree(run, tmp_path / "read", ignore=shutil.ignore_patterns("*.lock", ".*"))
        merged = store.merge(TOOLS, counted=True)
    expected = merge_run(tmp_path / "read", TOOLS)
    assert (run / "trajectories.jsonl").read_bytes() == (
        tmp_path / "read" / "trajectories.jsonl"
    ).read_bytes()
    assert {**merged.as_dict(), "ahead_files": 0, "counted_left_out": 0} == {
        **expected.as_dict(),
        "counted_left_out": 0,
    }
    assert isinstance(merged.kept_keys, PlannedKeys) and isinstance(expected.kept_keys, KeySet)
    assert sorted(merged.kept_keys) == sorted(expected.kept_keys)
    assert merged.written == expected.written > 0 and merged.duplicates > 0
