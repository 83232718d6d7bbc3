"""trajectories.jsonl continued where the last end left it, instead of written again (issue 26:
a resume's end does not grow with the run).

The merged output lists the batch files' lines file after file. When the last end wrote every
line as it is (the end that keeps the output's figures, `agent.store.output_figures`), its
trajectories.jsonl is exactly those files merged; that end keeps, with the figures, each batch
file's size, inode, modification and change times and trajectories.jsonl's (`OutputBase`). A
later end whose batch files begin with those same files, each untouched since (an edit in place
moves the change time on, whatever it puts back), and whose trajectories.jsonl is the file that
end left, writes only the lines of the files after them: appended to trajectories.jsonl in place
(`appending`), fsynced. A resume with nothing left to run writes nothing at all; one that added
prompts copies their lines only. Any other end merges everything into a new file, renamed over
the old one, as before.

Appending is not atomic: killed while it appends, trajectories.jsonl ends with some of the new
lines (perhaps the last one torn) and no longer matches the kept stamp, so the next end writes it
whole again. A failed write (the disk full) cuts the file back to the length it had.
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from agent.protocols.store import KeyBook
from agent.store.layout import Stamp, batch_files, file_stamp
from agent.store.merge_shard import packed_keys, plain_rows
from agent.store.shard_index import ROW, Shard

log = logging.getLogger(__name__)

_NUMBERED = re.compile(r"batch_(\d+)\.jsonl")


@dataclass(frozen=True)
class OutputBase:
    """The output as the last end left it (`output`), and the batch files it holds whole, in
    the merge's order, as they were then (`files`: name and stamp)."""

    files: tuple[tuple[str, Stamp], ...]
    output: Stamp

    @property
    def last_batch(self) -> int:
        """The highest batch number among the files (-1 with none): a batch the run writes to
        must come after it."""
        numbers = [int(match.group(1)) for name, _ in self.files if (match := _NUMBERED.fullmatch(name))]
        return max(numbers, default=-1)

    def holds(self, files: Sequence[Path], output: Path) -> bool:
        """Whether `output` and the first of `files` (the run's batch files, in the merge's
        order) are still as the end that kept this base left them, the last of those perhaps
        grown since (`grown`)."""
        if len(files) < len(self.files) or file_stamp(output) != self.output:
            return False
        if not self.files:  # (`base_document` keeps none such)
            return False
        *whole, (last, (last_name, _)) = zip(files, self.files, strict=False)
        return (
            all(path.name == name and file_stamp(path) == kept for path, (name, kept) in whole)
            and last.name == last_name
            and self.grown(last) is not None
        )

    def grown(self, path: Path) -> bool | None:
        """Whether the last file the base holds (`path`) grew since (appended to: the same file,
        longer); False when it is as it was, None when it is neither."""
        kept, now = self.files[-1][1], file_stamp(path)
        if now == kept:
            return False
        return True if now is not None and now[1] == kept[1] and now[0] > kept[0] else None

    def held_rows(self, last: Shard, data: bytes, valid_tools: Collection[str]) -> int | None:
        """How many of `last`'s recorded lines (the last file the base holds, its bytes `data`)
        the output holds: those within the file's kept size, each the same bytes still; None
        unless the lines after them are plain (no tombstone, no unknown tool: merged as they
        are) and sort after them (`prompt_index`), so that the output can be continued."""
        size, rows, held = self.files[-1][1][0], list(ROW.iter_unpack(last.rows)), self.within(last)
        if held and rows[held - 1][0] + rows[held - 1][1] + 1 != size:
            return None  # the kept size does not end on a recorded line
        if any(zlib.crc32(data[row[0] : row[0] + row[1]]) != row[3] for row in rows[:held]):
            return None
        if not plain_rows(last, held, valid_tools):
            return None
        after = min((row[2] for row in rows[held:]), default=None)
        return None if after is not None and after < max((row[2] for row in rows[:held]), default=0) else held

    def within(self, last: Shard) -> int:
        """How many of `last`'s records (the last file's) begin within the size it was kept at."""
        size = self.files[-1][1][0]
        return sum(1 for row in ROW.iter_unpack(last.rows) if row[0] < size)


def base_document(directory: Path, output: Path) -> list[Any] | None:
    """What an end keeps of the output it just wrote (every batch file merged whole, as it
    is): [output's stamp, [[name, stamp]...]]; None when a file is not numbered (a base must
    say which batches come after it), or no file was merged."""
    files = batch_files(directory)
    kept = file_stamp(output)
    listed: list[Any] = []
    for path in files:
        stamp = file_stamp(path)
        if stamp is None or not _NUMBERED.fullmatch(path.name):
            return None
        listed.append([path.name, list(stamp)])
    return None if kept is None or not listed else [list(kept), listed]


def base_of(document: Any) -> OutputBase | None:
    """The base `base_document` kept; None for anything else (an older or damaged file)."""
    if not isinstance(document, list) or len(document) != 2 or not isinstance(document[1], list):
        return None
    output, files = _stamp(document[0]), []
    for item in document[1]:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
            return None
        kept = _stamp(item[1])
        if kept is None:
            return None
        files.append((item[0], kept))
    return None if output is None else OutputBase(tuple(files), output)


def _stamp(value: Any) -> Stamp | None:
    if not isinstance(value, list) or len(value) != 4:
        return None
    if not all(isinstance(part, int) and not isinstance(part, bool) and part >= 0 for part in value):
        return None
    return value[0], value[1], value[2], value[3]


def note_keys(shard: Shard, book: KeyBook, rows: int | None = None) -> int:
    """Note the keys of `shard`'s first `rows` records (every one by default) in `book` (the
    lines a base holds); how many."""
    listed = list(ROW.iter_unpack(shard.rows))[:rows]
    for row, key in zip(listed, packed_keys(shard.keys, (row[4] for row in listed)), strict=True):
        book.note(key, row[2])
    return len(listed)


@contextmanager
def appending(output: Path, size: int) -> Iterator[BinaryIO]:
    """`output` open to append to, `size` bytes long (`OutputBase.holds` checked it); on leaving,
    fsynced. If the block raises, the file is cut back to `size`."""
    handle = output.open("ab")
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        try:
            os.truncate(output, size)
        except OSError as exc:  # it no longer matches the kept stamp: the next end writes it whole
            log.warning("could not cut %s back to %d bytes: %s", output.name, size, exc)
        raise
