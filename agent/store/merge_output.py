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
from agent.store.merge_shard import copy_shard
from agent.store.output_base import OutputBase, appending, note_keys
from agent.store.shard_index import Shard, ShardChanged, ShardRecords


class Start(NamedTuple):
    """What a merge may start from: the files merged `ahead`, the output's `base`, the `records`
    when every line they record is counted already and no sidecar is written (else None: only
    a new file will do), the keys left out (`exclude`) and the tools known (`valid_tools`)."""

    ahead: MergeAhead | None
    base: OutputBase | None
    records: ShardRecords | None
    exclude: Collection[str]
    valid_tools: Collection[str]


def merge_output(
    stack: ExitStack, target: Path, files: list[Path], report: MergeReport, start: Start
) -> tuple[BinaryIO, list[Path]]:
    """The merged file's writer (finished as the stack closes, before the sidecar) and the files
    left to copy into it."""
    ahead, base, records, exclude, _tools = start
    if records is not None and base is not None and not exclude and base.holds(files, target):
        last = _last_held(files, base, records, start.valid_tools)
        if last is not None:
            return _continued(stack, target, files, report, start, last)
    if ahead is not None and records is not None and not ahead.after and ahead.holds(files, exclude):
        report.add(ahead.counts)
        report.kept_keys, report.ahead_files = ahead.kept, len(ahead.copies)
        return stack.enter_context(ahead.continued(target)), files[len(ahead.copies) :]
    if ahead is not None:
        ahead.drop()
    return stack.enter_context(atomic_write(target)), files


def _last_held(
    files: list[Path], base: OutputBase, records: ShardRecords, valid_tools: Collection[str]
) -> tuple[Shard, int] | None:
    """The last file the output holds (its records) and how many of its lines the output
    holds (`OutputBase.held_rows`), when the output can be continued; None otherwise."""
    path = files[len(base.files) - 1]
    shard, grown = records.of(path), base.grown(path)
    if shard is None or grown is None:
        return None
    if not grown:
        return shard, shard.count
    with path.open("rb") as handle:
        data = handle.read(base.files[-1][1][0])
    held = base.held_rows(shard, data, valid_tools)
    return None if held is None else (shard, held)


def _continued(
    stack: ExitStack,
    target: Path,
    files: list[Path],
    report: MergeReport,
    start: Start,
    last: tuple[Shard, int],
) -> tuple[BinaryIO, list[Path]]:
    """`target` continued in place after the files `base` holds (their keys noted, their
    lines counted as written), the lines appended to the last of them since, and the files
    merged ahead after those; the files left to copy."""
    ahead, base, records = start.ahead, start.base, start.records
    assert base is not None and records is not None  # merge_output
    held_files, (shard, held) = len(base.files), last
    found = [records.of(path) for path in files[: held_files - 1]]
    whole = [one for one in found if one is not None]
    if len(whole) < len(found):  # every file a base holds is recorded whole
        raise ShardChanged("a file trajectories.jsonl holds is not recorded")
    out = stack.enter_context(appending(target, base.output[0]))
    report.in_place_files, report.written = held_files, sum(one.count for one in whole) + held
    usable = ahead is not None and ahead.after == held_files and ahead.holds(files, ())
    if ahead is not None and usable:
        report.kept_keys = ahead.kept  # the held keys noted already (`MergeAhead.after_base`)
    else:
        if ahead is not None:
            ahead.drop()
        for one, rows in [*((one, None) for one in whole), (shard, held)]:
            note_keys(one, report.kept_keys, rows)
    if held < shard.count:  # the lines appended to the last since
        path = files[held_files - 1]
        copied = copy_shard(path, shard, start.valid_tools, (), report.kept_keys, out, first=held)
        if copied is None:  # (plain rows: `OutputBase.held_rows`)
            raise ShardChanged(f"{path.name}: a line calls a tool no longer known")
        report.add(copied)
    if ahead is not None and usable:
        report.add(ahead.counts)
        report.ahead_files = len(ahead.copies)
        ahead.pour(out)
    return out, files[held_files + report.ahead_files :]
