"""Bytes per prompt of each per-prompt structure the parent keeps, packed and as the objects it
replaced (issue 26), measured with tracemalloc over 100,000 made-up prompts:

    python bench/million_sizes.py [--prompts=100000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.batch.dataset_copies import CopyCounter, RowKeys
from agent.batch.planned import PlannedKeys, PlannedUnits, Unit
from agent.batch.tally import IndexSet
from agent.store.figures import EntryFigures, FiguresTable
from agent.store.keys import prompt_hash
from agent.store.shard_index import Line, Shard, ShardRecords

USAGE = {"prompt_tokens": 1370, "completion_tokens": 25, "reasoning_tokens": 10, "total_tokens": 1395}


def measure(name: str, prompts: int, build: Callable[[], Any]) -> None:
    tracemalloc.start()
    kept = build()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"{name:40s} {size / prompts:7.1f} B/prompt")
    del kept


def records(keys: list[str]) -> ShardRecords:
    made = ShardRecords()
    for start in range(0, len(keys), 100):  # --batch_size=100
        shard = made.shards.setdefault(f"batch_{start // 100}.jsonl", Shard(0, made._names))
        for n in range(start, min(start + 100, len(keys))):
            shard.append(Line(n * 9000, 8999, n, keys[n], False, (), (), 12345678), 0, 0)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=100_000)
    n = parser.parse_args().prompts
    keys = [f"{prompt_hash(f'p{i}')}:0" for i in range(n)]

    def figures() -> EntryFigures:
        return EntryFigures(True, False, 1, "completed", json.loads(json.dumps(USAGE)))

    def table() -> FiguresTable:
        made = FiguresTable()
        for i, key in enumerate(keys):
            made.put(key, i, figures())
        return made

    def units() -> PlannedUnits:  # the scan's row keys, which the plan keeps as they are
        rows = RowKeys()
        for key in keys:
            rows.append(key[:20], 0)
        return PlannedUnits(rows)

    def copies() -> CopyCounter:
        made = CopyCounter()
        for key in keys:
            made.see(key[:20])
        return made

    def done() -> IndexSet:
        made = IndexSet()
        for i in range(n):
            made.add(i)
        return made

    measure("done indices: IndexSet", n, done)
    measure("  was set[int]", n, lambda: {i + 1000 for i in range(n)})
    measure("figures per entry: FiguresTable", n, table)
    measure("  was dict[str, EntryFigures]", n, lambda: {k[:-1] + "0": figures() for k in keys})
    measure("units planned: PlannedUnits", n, units)
    measure("  was list[Unit]", n, lambda: [Unit(k[:-1] + "0", i + 1000, 0) for i, k in enumerate(keys)])
    measure("copies per prompt hash: CopyCounter", n, copies)
    measure("  was dict[str, int]", n, lambda: {k[:20]: 1 for k in keys})
    measure("shard records: packed", n, lambda: records(keys))

    def lines() -> list[Line]:
        return [
            Line(i * 9000 + 10**6, 8999, i + 1000, k[:-1] + "0", False, (), (), 10**9 + i)
            for i, k in enumerate(keys)
        ]

    measure("  was list[Line]", n, lines)
    plan = units()

    def merged(table: bool) -> PlannedKeys:  # every key noted with its line's index
        made = PlannedKeys(plan)
        for i, key in enumerate(keys):
            made.note(key, i)
        if table:  # a key asked for without its index: the plan's lookup table is built
            assert f"{prompt_hash('absent')}:0" not in made
        return made

    measure("keys merged: PlannedKeys", n, lambda: merged(False))
    measure("  with the plan's lookup table", n, lambda: merged(True))
    measure("  was set[str]", n, lambda: {k[:-1] + "0" for k in keys})
    measure(
        "still objects: dict[str, int] key->number",
        n,
        lambda: {k[:-1] + "0": i + 1000 for i, k in enumerate(keys)},
    )


if __name__ == "__main__":
    main()
