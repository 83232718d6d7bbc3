"""A run's counters, one object fed by its events (`RunTally`): what this invocation did (the
statistics' `this_invocation` side, `RunStatistics`), which prompts are done, the per-batch
counts of checkpoint.json, the prompts that failed or were cancelled, each prompt's earlier
failed attempts, the entries the re-applied filters moved; and what it counted of each entry it
wrote.

The merge does not count this invocation's prompts again: it describes the merged data (every
invocation's entries) and checks this invocation's entries in it against what the run counted
from their events (`MergeCheck`): a difference (a batch file edited between the run and the
merge, a bug) is one warning line and the `merge_check` section of statistics.json.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from pathlib import Path
from typing import Any, Literal

from agent.batch.events import Cancelled, Discarded, Failed, Finished, LimiterReport, WorkerEvent
from agent.loop.conversation import PARTIAL
from agent.protocols.store import KeyBook
from agent.store.figures import EntryFigures, FiguresTable
from agent.store.jsonl import json_int
from agent.store.statistics import RunStatistics

log = logging.getLogger("agent.batch.run")

Advance = Literal["done", "partial", "discarded", "failed"]  # a prompt answered, for the progress
NAMED = 10  # prompt keys named in the check, the rest counted
DENSE = 1 << 20  # how far past the indices held a packed table grows for a new one
_PARTIAL = frozenset(str(outcome) for outcome in PARTIAL)  # an entry's `partial`, by its outcome


@dataclass
class MergeCheck:
    """This invocation's entries as the merge reads them, against what the run counted."""

    counted: FiguresTable
    checked: int = 0
    differences: dict[str, int] = field(default_factory=dict)  # figure -> entries it differs in
    keys: list[str] = field(default_factory=list)  # the first entries that differ

    def entry(self, entry: Mapping[str, Any]) -> EntryFigures | None:
        """The figures the run counted of `entry`, checked against the entry's own; None for
        an entry of an earlier invocation (its figures are the entry's)."""
        metadata = entry.get("metadata")
        key = metadata.get("prompt_key") if isinstance(metadata, dict) else None
        counted = self.counted.get(key, entry.get("prompt_index")) if isinstance(key, str) else None
        if not isinstance(key, str) or counted is None:
            return None
        self.checked += 1
        differing = counted.differences(EntryFigures.of(entry))
        for name in differing:
            self.differences[name] = self.differences.get(name, 0) + 1
        if differing and len(self.keys) < NAMED:
            self.keys.append(key)
        return counted

    def report(self, merged: KeyBook, moved: Collection[str]) -> dict[str, Any]:
        """The `merge_check` section; a warning line when anything differs. `merged`: the keys
        written; `moved`: those the merge moved to discarded.jsonl (not missing)."""
        missing = sorted(k for k, i in self.counted.items() if not merged.has(k, i) and k not in moved)
        section = {
            "entries_counted": len(self.counted),
            "entries_checked": self.checked,
            "missing": len(missing),
            "differences": dict(sorted(self.differences.items())),
            "differing_keys": self.keys,
            "ok": not missing and not self.differences,
        }
        if not section["ok"]:
            figures = ", ".join(f"{name} in {n}" for name, n in sorted(self.differences.items()))
            log.warning(
                "the merged output differs from what this run counted (%d missing%s): a batch file "
                "edited during the run? statistics.json has the run's figures; see merge_check",
                len(missing),
                f"; {figures}" if figures else "",
            )
        return section


class Paced:
    """When a periodic write whose cost grows with the run is next due: at most `share` of the
    time goes to it (issue 26: checkpoint.json lists every done prompt; at a million prompts
    it is ~13 MB and ~0.7 s of the parent's CPU to write, which every second would be most of
    the parent's time)."""

    def __init__(self, share: float = 0.05, clock: Callable[[], float] = time.monotonic) -> None:
        self.share, self.clock, self.next_at = share, clock, 0.0

    def tick(self, write: Callable[[], None], otherwise: Callable[[], None]) -> None:
        """`write` when it is due, else `otherwise` (the part of a tick that is cheap)."""
        started = self.clock()
        if started < self.next_at:
            otherwise()
            return
        write()
        ended = self.clock()
        self.next_at = ended + (ended - started) / self.share


class IndexSet:
    """A set of prompt indices (>= 0): one byte per index up to the largest of a dense run (a
    million-prompt run's done prompts in 1 MB, where a `set[int]` held ~70 MB); an index far
    past them (a hand-edited line's) in a plain set, so one never costs its value in bytes."""

    def __init__(self) -> None:
        self._marks = bytearray()
        self._far: set[int] = set()

    def add(self, index: int) -> None:
        if index < 0:
            raise ValueError(f"a prompt index is never negative: {index}")
        if index >= len(self._marks):
            if index >= 2 * len(self._marks) + DENSE:
                self._far.add(index)
                return
            self._marks.extend(bytes(max(index + 1 - len(self._marks), len(self._marks) // 2)))
            for near in [n for n in self._far if n < len(self._marks)]:  # every far one stays past
                self._far.discard(near)
                self._marks[near] = 1
        self._marks[index] = 1

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int) or index < 0:
            return False
        return index in self._far if index >= len(self._marks) else self._marks[index] == 1

    def __len__(self) -> int:
        return self._marks.count(1) + len(self._far)

    def sorted(self) -> list[int]:
        return list(self)

    def __iter__(self) -> Iterator[int]:
        """The indices in ascending order."""
        yield from compress(range(len(self._marks)), self._marks)
        yield from sorted(self._far)


class RunTally:
    """Every counter of one invocation, fed by `count` (each event) and `plan` (the prompts
    found done when it started)."""

    def __init__(
        self, batch_size: int, failures: Mapping[str, int] | None = None, spill_dir: Path | None = None
    ) -> None:
        """`spill_dir`: where the figures of the entries written go (`FiguresTable`), unnamed."""
        self.batch_size = batch_size
        self.stats = RunStatistics()
        self.done_indices = IndexSet()  # one byte per prompt_index, not a set's ~60
        self.batches: dict[int, dict[str, int]] = {}
        self.attempts = dict(failures or {})  # key -> failed attempts before this invocation
        self.failed_keys: set[str] = set()
        self.cancelled_keys: set[str] = set()  # in flight when the run was stopped
        self.written = FiguresTable(spill_dir)  # key -> what was counted of the entry written
        # entries the re-applied filters moved, per reason (`agent.batch.recovery`)
        self.recovered, self.withdrawn = Counter[str](), Counter[str]()

    def plan(self, prompt_index: int, *, done: bool, discarded: bool = False) -> None:
        """A prompt of this run: already done (`discarded`: by a filter), or to run."""
        batch = self._batch(prompt_index)
        batch["total"] += 1
        if done:
            self.done_indices.add(prompt_index)
            batch["processed"] += 1
            batch["discarded"] += discarded  # an earlier invocation's: a resume dropped them

    def attempt(self, key: str) -> int:
        """The attempt a failure of `key` now is."""
        return self.attempts.get(key, 0) + 1

    def count(self, event: WorkerEvent) -> Advance | None:
        """Count `event`; for an answer, what the progress shows of it."""
        match event:
            case Finished():
                self._done(event.prompt_index)
                self.stats.add_processed(event.outcome, event.usage, event.api_calls)
                partial = event.outcome in _PARTIAL
                figures = EntryFigures(event.completed, partial, event.api_calls, event.outcome, event.usage)
                self.written.put(event.key, event.prompt_index, figures)
                return "done" if event.completed else "partial"
            case Discarded():
                self._done(event.prompt_index, discarded=True)
                self.stats.add_discard(event.reason)
                self.stats.add_processed("discarded", event.usage, json_int(event.entry.get("api_calls")))
                return "discarded"
            case Failed():
                self.failed_keys.add(event.key)
                self._batch(event.prompt_index)["failed"] += 1
                self.stats.add_failure(event.error_class)
                self.stats.add_processed("failed", event.usage)
                return "failed"
            case Cancelled():
                self.cancelled_keys.add(event.key)
            case LimiterReport():
                self.stats.add_limiter(event.stats)
        return None

    def answered(self, number: int) -> bool:
        """Whether every prompt of batch `number` has an answer (done, discarded or failed)."""
        batch = self.batches[number]
        return batch["processed"] + batch["failed"] >= batch["total"]

    def merge_check(self) -> MergeCheck:
        return MergeCheck(self.written)

    def checkpoint(self, run_name: str, *, listed: bool = True) -> dict[str, Any]:
        """The `checkpoint.json` document (derived from the logs, for the reference's readers);
        `listed=False`: without `completed_prompts` (`done_indices`, in order), which the
        caller writes a chunk at a time."""
        document: dict[str, Any] = {"run_name": run_name}
        if listed:
            document["completed_prompts"] = self.done_indices.sorted()
        document["batch_stats"] = {str(k): v for k, v in sorted(self.batches.items())}
        document["last_updated"] = datetime.now().isoformat()
        return document

    def _batch(self, prompt_index: int) -> dict[str, int]:
        number = prompt_index // self.batch_size
        return self.batches.setdefault(number, {"total": 0, "processed": 0, "discarded": 0, "failed": 0})

    def _done(self, prompt_index: int, discarded: bool = False) -> None:
        self.done_indices.add(prompt_index)
        batch = self._batch(prompt_index)
        batch["processed"] += 1
        batch["discarded"] += discarded
