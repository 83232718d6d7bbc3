"""The merged output written ahead, while the run goes: a batch file whose prompts are all
answered is copied into a temp file beside trajectories.jsonl (`copy_shard`, the merge's
fast path), so the end of a run copies only the last few files and renames (issue 26: at
200,000 entries, copying and fsyncing 1.8 GB after the last reply was most of the user's wait,
and more than the 3 s the end may take).

Each line's CRC is checked as it is copied (against its record). The end's merge takes the temp
file only when the batch files it holds are still the first ones the merge reads, each the same
file with the same size, modification and change times (an edit in place moves the change time
on, whatever it puts back), and none of their keys is left out at the end (`exclude`);
otherwise the temp file is dropped and the merge writes everything, as before. Files are copied
in the merge's order only: the first that cannot be (lines of an earlier invocation, a tool the
registry does not know, over WHOLE_READ_BYTES) stops the copying there. A write that fails (the
disk full) drops the temp file, and the run goes on. The temp file is never renamed before the
end, so a kill leaves trajectories.jsonl as it was and the temp file for the next invocation's
repair to remove (`TEMP_SUFFIX`).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import BinaryIO, NamedTuple

from agent.protocols.store import KeyBook
from agent.store.durable import TEMP_SUFFIX, replacing
from agent.store.key_book import KeySet
from agent.store.layout import TRAJECTORIES_FILE, Stamp, file_stamp
from agent.store.merge_shard import Copied, copy_shard, copyable
from agent.store.output_base import OutputBase, note_keys
from agent.store.shard_index import Shard, ShardChanged, ShardRecords

log = logging.getLogger(__name__)

POUR_BYTES = 4 << 20  # the copies go on to the output this much at a time


class Copy(NamedTuple):
    name: str
    stamp: Stamp  # when copied (`layout.file_stamp`)


class MergeAhead:
    """The batch files copied so far, in the merge's order, into one temp file; those after
    the first `after`, when the output already holds them (`agent.store.output_base`)."""

    def __init__(self, directory: Path, output: str, kept: KeyBook | None = None, after: int = 0) -> None:
        """`kept`: the keys the output holds already (those of the first `after` files)."""
        self.temp = directory / f".{output}.ahead.{os.getpid()}{TEMP_SUFFIX}"
        self.after = after
        self.copies: list[Copy] = []
        self.kept: KeyBook = KeySet() if kept is None else kept  # the keys written so far
        self.counts = Copied(0, 0, 0, 0, 0)
        self._handle: BinaryIO | None = None
        self.stopped = False  # a file could not be copied: nothing after it can be

    @classmethod
    def after_base(
        cls, directory: Path, kept: KeyBook, base: OutputBase | None, records: ShardRecords
    ) -> MergeAhead:
        """Copies for trajectories.jsonl of the files after those it holds already (`base`), their
        keys noted in `kept` first (a later line of one of them is a duplicate); with no base, of
        every file."""
        if base is None:
            return cls(directory, TRAJECTORIES_FILE, kept)
        for n, (name, _stamp) in enumerate(base.files, 1):
            shard = records.shards.get(name)
            if shard is not None:  # (else the end finds that the base no longer holds)
                note_keys(shard, kept, base.within(shard) if n == len(base.files) else None)
        return cls(directory, TRAJECTORIES_FILE, kept, after=len(base.files))

    def add(self, path: Path, shard: Shard | None, valid_tools: Collection[str]) -> bool:
        """Copy `path` (the next batch file in the merge's order, its prompts all answered) if
        the fast path can; False, and no file copied from now on, when it cannot."""
        if self.stopped or shard is None or not copyable(shard, True, False):
            return self._stop()
        stamp = file_stamp(path)
        if stamp is None or stamp[0] != shard.end:
            return self._stop()
        try:
            if self._handle is None:
                self._handle = self.temp.open("wb")
            copied = copy_shard(path, shard, valid_tools, (), self.kept, self._handle)
        except ShardChanged as exc:  # the end's merge finds it too, and counts from the files
            log.debug("merging ahead stopped at %s: %s", path.name, exc)
            self.drop()
            return False
        except OSError as exc:  # the disk full: the run goes on, the end merges everything
            log.warning("merging trajectories.jsonl ahead stopped (the end merges it all): %s", exc)
            self.drop()
            return False
        if copied is None:
            return self._stop()
        self.copies.append(Copy(path.name, stamp))
        self.counts = Copied(*(a + b for a, b in zip(self.counts, copied, strict=True)))
        return True

    def _stop(self) -> bool:
        self.stopped = True
        return False

    def holds(self, files: Sequence[Path], exclude: Collection[str]) -> bool:
        """Whether the copies are still the first of `files` (after the first `after`), as they
        were copied, with no key of theirs in `exclude` (the end's merge may then continue from
        them)."""
        files = files[self.after :]
        if not self.copies or self._handle is None or len(files) < len(self.copies):
            return False
        now = [(path.name, file_stamp(path)) for path in files[: len(self.copies)]]
        return now == self.copies and not any(key in self.kept for key in exclude)

    def continued(self, target: Path) -> AbstractContextManager[BinaryIO]:
        """The temp file to append the rest to; on leaving, fsynced and renamed over `target`
        (`durable.replacing`); removed if the block raises."""
        assert self._handle is not None and not self.after  # holds(); a whole output's copies
        handle, self._handle = self._handle, None
        return replacing(handle, self.temp, target)

    def pour(self, out: BinaryIO) -> None:
        """Append the copies to `out` (the output continued in place), then remove the temp file."""
        assert self._handle is not None  # holds()
        self._handle.flush()
        with self.temp.open("rb") as copies:
            shutil.copyfileobj(copies, out, POUR_BYTES)
        self.drop()

    def drop(self) -> None:
        """Remove the temp file (the end's merge writes everything). Never raises: it runs
        after a failed write (the disk full) and as the run directory closes."""
        handle, self._handle = self._handle, None
        self.copies, self.kept, self.stopped = [], KeySet(), True
        try:
            if handle is not None:
                with suppress(OSError):  # what is still buffered cannot be written: closed anyway
                    handle.close()
            self.temp.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not remove %s (the next start removes it): %s", self.temp.name, exc)
