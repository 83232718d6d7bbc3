"""The merged output's statistics and report, counted as this invocation writes its result
lines, so the end of a run does not parse them again (issue 26: the user's wait at the end
does not grow with the run).

`RunDirectory` parses each result line once as it appends it and hands it over
(`take_appended`); `EndFold` counts it as the merge used to, when it read the line back: the
statistics (`RunStatistics.add_entry` with the figures the run counted of it), the report's
digest and the merge's check (`MergeCheck.entry`: what was written against the event).
The merge then copies those lines without parsing them (`merge_run(..., counted=True)`) and
counts only the others. On a resume, the earlier invocations' lines are counted during the
run too, a share with each answer (`count_earlier`, `answered`: `agent.store.earlier_lines`),
so its end parses none of them either, but for a shard it must judge line by line. A counted
line the merge leaves out (a duplicate, a key --keep withdrew at the end, an entry calling an
unknown tool the run does not keep) or a shard changed since it was written (`ShardChanged`)
makes the fold wrong: it is counted again the old way, every line read (`_recount`), so the
numbers are always those of a full recount of the run directory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from agent.batch.tally import RunTally
from agent.config.run_config import RunConfig
from agent.protocols import RunStore
from agent.protocols.store import MergeSummary
from agent.report import RunReport
from agent.report.digest import OUTPUT_FIELDS as DIGEST_FIELDS
from agent.store.directory import RunDirectory
from agent.store.earlier_lines import EarlierLines, earlier_rows
from agent.store.layout import TRAJECTORIES_FILE, batch_file_name, batch_files
from agent.store.merge import UNKNOWN_TOOL_REASON
from agent.store.merge_report import MergeReport
from agent.store.output_base import OutputBase, base_document, base_of
from agent.store.output_figures import FIGURES_FILE, figures_head, figures_of, figures_pieces, recalled
from agent.store.output_figures import forget as forget_figures
from agent.store.shard_index import ROW, ShardChanged
from agent.store.state_codec import capture, restore
from agent.store.statistics import OUTPUT_FIELDS
from agent.toolbox.registry import TOOL_TO_TOOLSET_MAP

log = logging.getLogger("agent.batch.run")

EARLY = 4  # a resume's earlier lines are counted by the first quarter of its answers
EARLY_PER_ANSWER = 64  # … at most this many with one answer (a bounded stall, bounded memory)
AHEAD_PER_CALL = 4  # batch files merged ahead at most per event


class EndFold:
    """The merged output's figures of the lines appended so far (`take`), and the merge that
    counts the rest (`merge`)."""

    def __init__(self, run_dir: Path, tally: RunTally, *, ahead: bool = False) -> None:
        """`ahead`: merge the output ahead as batches complete (`merge_ahead`)."""
        self.run_dir, self.tally = run_dir, tally
        self.report = RunReport(run_dir)  # the merge gives the output's keys
        self.check = tally.merge_check()
        self._batches: list[int] | None = None  # the planned batches in order, once the run starts
        self._ahead = 0  # the next of them to merge ahead
        self._merges_ahead = ahead
        self._earlier: EarlierLines | None = None  # a resume's earlier lines, counted during the run
        self._answers_left = 0  # answers still to come: the earlier lines are spread over them
        self._recalled: dict[str, int] = {}  # rows of each shard the kept figures counted (`recall`)

    def add_entry(self, entry: dict[str, Any]) -> None:
        """One entry of the output, counted as the merge counts it."""
        self.tally.stats.add_entry(entry, self.check.entry(entry))
        self.report.add_entry(entry)

    def take(self, store: RunStore) -> None:
        """Count the result lines appended since the last call (tombstones are never merged)."""
        if isinstance(store, RunDirectory):
            for entry, line in store.take_appended():
                if not line.tombstone:
                    self.add_entry(entry)

    def recall(self, store: RunStore) -> None:
        """Start from the figures the last end kept (`agent.store.output_figures`), where they
        still describe the batch files: before anything is counted. A shard they counted whole
        counts as this process's from now on (`Shard.start` 0: copied, not parsed)."""
        if not isinstance(store, RunDirectory) or not store.records.usable or self.report.digest.entries:
            return
        document = store.read_json(FIGURES_FILE)
        counted = recalled(document, store.records, TOOL_TO_TOOLSET_MAP)
        if counted is None:
            return
        try:
            restore(self.tally.stats, figures_of(document, "statistics"), OUTPUT_FIELDS)
            restore(self.report.digest, figures_of(document, "report"), DIGEST_FIELDS)
            self.report.recalled()
        except (ValueError, KeyError, TypeError) as exc:  # an older or damaged file: count them all
            log.info("%s: not used (%s)", FIGURES_FILE, exc)
            self.tally.stats.reset_output()
            self.report = RunReport(self.run_dir)
            return
        shards = store.records.shards
        for name, rows in counted.items():
            if rows == earlier_rows(shards[name]):
                shards[name].start = 0
        self._recalled = counted
        store.output_base = self._base(store, figures_of(document, "output").get("base"), counted)

    def _base(self, store: RunDirectory, kept: Any, counted: dict[str, int]) -> OutputBase | None:
        """trajectories.jsonl as the last end left it, to continue in place at this end
        (`agent.store.output_base`): when it and the files it holds are still as they were and
        the figures count those files whole, and when this run writes no line that would sort
        among its lines (every batch with prompts left to run comes after the last file it
        holds, or is that file's, each of whose prompts up to its last line is done)."""
        base = base_of(kept)
        if base is None or not base.holds(batch_files(store.path), store.path / TRAJECTORIES_FILE):
            return None
        shards = store.records.shards
        for name, _stamp in base.files:
            shard = shards.get(name)
            if shard is None or counted.get(name) != shard.count or shard.start:
                return None
        last = base.last_batch
        pending = {number for number in self.tally.batches if not self.tally.answered(number)}
        if any(number < last for number in pending):
            return None
        if last in pending:  # the prompts it holds must be all those up to its last line's
            held = max((row[2] for row in ROW.iter_unpack(shards[base.files[-1][0]].rows)), default=-1)
            done, first = self.tally.done_indices, last * self.tally.batch_size
            if not all(index in done for index in range(first, held + 1)):
                return None
        return base

    def remember(self, store: RunDirectory, merged: MergeReport) -> None:
        """Keep the figures of a merge that wrote every recorded line as it is, for the next
        resume (`recall`); else remove those an earlier end kept."""
        skipped = merged.duplicates + merged.tombstones + merged.invalid_lines + merged.labelled
        head = None
        if not (skipped or merged.not_kept or merged.withdrawn) and store.records.usable:
            head = figures_head(store.path, store.records, set(TOOL_TO_TOOLSET_MAP), merged.written)
        try:
            if head is not None:
                figures = {
                    "statistics": capture(self.tally.stats, OUTPUT_FIELDS),
                    "report": capture(self.report.digest, DIGEST_FIELDS),
                    "output": {"base": base_document(store.path, store.path / TRAJECTORIES_FILE)},
                }
                store.write_pieces(FIGURES_FILE, figures_pieces(head, figures))
                return
        except ValueError as exc:  # a figure JSON cannot hold (an endpoint's NaN cost): not kept
            log.info("%s: not written (%s)", FIGURES_FILE, exc)
        forget_figures(store.path)  # an earlier end's: with this end's tombstones, they never hold again

    def count_earlier(self, store: RunStore, answers: int) -> None:
        """Count the lines earlier invocations wrote during the run (`agent.store.earlier_lines`),
        spread over the first of the `answers` to come (`answered`)."""
        if isinstance(store, RunDirectory) and store.records.usable:
            valid = set(TOOL_TO_TOOLSET_MAP)
            self._earlier = EarlierLines(store.path, store.records, valid, self._recalled)
            self._answers_left = answers

    def answered(self, store: RunStore) -> None:
        """One answer came (an attempt done, discarded or failed): count its share of the
        earlier lines, so that all are counted by the first 1/EARLY of the answers (the
        files after theirs are merged ahead only then), at most EARLY_PER_ANSWER; `merge`
        counts those left."""
        earlier = self._earlier
        if earlier is None or not earlier.left:
            return
        share = -(-earlier.left // max(self._answers_left // EARLY, 1))  # rounded up
        self._answers_left -= 1
        self._count_earlier_lines(store, min(share, EARLY_PER_ANSWER))

    def _count_earlier_lines(self, store: RunStore, limit: int) -> int:
        """Count up to `limit` earlier lines; how many were counted."""
        if self._earlier is None:
            return 0
        try:
            taken = self._earlier.take(limit)
        except ShardChanged as exc:  # what was counted is wrong: the end counts from the files
            log.warning("%s: the merged output is counted again from the files at the end", exc)
            self._earlier = None
            if isinstance(store, RunDirectory):
                store.forget_records()
            return 0
        for entry in taken:
            self.add_entry(entry)
        return len(taken)

    def merge_ahead(self, store: RunStore) -> None:
        """Copy the next batch files whose prompts are all answered (done, discarded or failed)
        into trajectories.jsonl ahead of the end (`agent.store.merge_ahead`): O(1) an event, at
        most AHEAD_PER_CALL files, so a backlog (the files behind a slow prompt, a resume's
        earlier files once counted) is copied over the next events, not in one stall."""
        if not isinstance(store, RunDirectory):
            return
        if self._batches is None:  # those after the files the output holds already, if any
            after = store.output_base.last_batch if store.output_base is not None else -1
            self._batches = sorted(n for n in self.tally.batches if n > after) if self._merges_ahead else []
        for _copy in range(AHEAD_PER_CALL):
            if self._ahead >= len(self._batches):
                return
            number = self._batches[self._ahead]
            if not self.tally.answered(number):
                return
            if self._earlier is not None and self._earlier.waiting(batch_file_name(number)):
                return  # copyable once its earlier lines are counted
            if not store.merge_ahead(number, set(TOOL_TO_TOOLSET_MAP)):  # the registry's, as `merge`
                self._batches = []  # none after it can be
                return
            self._ahead += 1

    def merge(self, config: RunConfig, store: RunStore, exclude: set[str]) -> MergeSummary:
        """Merge trajectories.jsonl, `exclude`'s keys left out; the lines taken are not counted
        again, the others are (a fold gone wrong: every line, `_recount`)."""
        valid, keep = set(TOOL_TO_TOOLSET_MAP), config.keeps(UNKNOWN_TOOL_REASON)
        if not isinstance(store, RunDirectory):
            return store.merge(valid, self.add_entry, exclude=exclude, keep_unknown=keep)
        self.take(store)
        if self._earlier is None and self._recalled:  # no run (nothing left): counted here
            self.count_earlier(store, 0)
        # the earlier lines the answers did not count (fewer came than planned: --max_cost, a
        # crash loop, a few prompts left): a shard partly counted must be counted whole
        while self._count_earlier_lines(store, EARLY_PER_ANSWER):
            pass
        try:
            merged = store.merge(valid, self.add_entry, exclude=exclude, keep_unknown=keep, counted=True)
        except ShardChanged as exc:
            log.warning("%s: counting the merged output again from the files", exc)
            merged = self._recount(store, valid, exclude, keep)
        if merged.counted_left_out:  # (a recount leaves none: it counts every line it merges)
            merged = self._recount(store, valid, exclude, keep)
        self.remember(store, merged)
        return merged

    def _recount(self, store: RunDirectory, valid: set[str], exclude: set[str], keep: bool) -> MergeReport:
        """The merge as it was before the fold: every line read and counted."""
        self.tally.stats.reset_output()
        self.report = RunReport(self.run_dir)
        self.check = self.tally.merge_check()
        store.forget_records()
        return store.merge(valid, self.add_entry, exclude=exclude, keep_unknown=keep)
