"""Where a merge writes: a new file renamed over the output as it ends (`durable.atomic_write`);
the temp file of the files merged ahead, continued and renamed the same way
(`agent.store.merge_ahead`); or the output itself, continued in place after the files it holds
already, the files merged ahead poured after them (`agent.store.output_base`).
"""

from __future__ import annotations

from collections.abc import Collection
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO, NamedTuple

from agent.store.durable import atomic_write
from agent.store.merge_ahead import MergeAhead
from agent.store.merge_report import MergeReport
from agent.store.output_base import OutputBase, appending, note_keys
from agent.store.shard_index import ShardChanged, ShardRecords


class Start(NamedTuple):
    """What a merge may start from: the files merged `ahead`, the output's `base`, the `records`
    when every line they record is counted already and no sidecar is written (else None: only
    a new file will do), and the keys left out (`exclude`)."""

    ahead: MergeAhead | None
    base: OutputBase | None
    records: ShardRecords | None
    exclude: Collection[str]


def merge_output(
    stack: ExitStack, target: Path, files: list[Path], report: MergeReport, start: Start
) -> tuple[BinaryIO, list[Path]]:
    """The merged file's writer (finished as the stack closes, before the sidecar) and the files
    left to copy into it."""
    ahead, base, records, exclude = start
    if records is not None and base is not None and not exclude and base.holds(files, target):
        return _continued(stack, target, files, report, ahead, (base, records))
    if ahead is not None and records is not None and not ahead.after and ahead.holds(files, exclude):
        report.add(ahead.counts)
        report.kept_keys, report.ahead_files = ahead.kept, len(ahead.copies)
        return stack.enter_context(ahead.continued(target)), files[len(ahead.copies) :]
    if ahead is not None:
        ahead.drop()
    return stack.enter_context(atomic_write(target)), files


def _continued(
    stack: ExitStack,
    target: Path,
    files: list[Path],
    report: MergeReport,
    ahead: MergeAhead | None,
    held: tuple[OutputBase, ShardRecords],
) -> tuple[BinaryIO, list[Path]]:
    """`target` continued in place after the files `base` holds (their keys noted, their
    lines counted as written), then after those merged ahead when they follow them; the files
    left to copy."""
    base, records = held
    shards = [records.of(path) for path in files[: len(base.files)]]
    for path, shard in zip(files, shards, strict=False):
        if shard is None:  # every file a base holds is recorded whole (`EndFold.recall`)
            raise ShardChanged(f"{path.name}: not recorded, yet trajectories.jsonl holds it")
    out = stack.enter_context(appending(target, base.output[0]))
    report.in_place_files = held_files = len(base.files)
    report.written = sum(shard.count for shard in shards if shard is not None)
    if ahead is not None and ahead.after == held_files and ahead.holds(files, ()):
        report.add(ahead.counts)
        report.kept_keys, report.ahead_files = ahead.kept, len(ahead.copies)
        ahead.pour(out)
        return out, files[held_files + report.ahead_files :]
    if ahead is not None:
        ahead.drop()
    for shard in shards:
        if shard is not None:
            note_keys(shard, report.kept_keys)
    return out, files[held_files:]
