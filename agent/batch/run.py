"""One batch run, start to finish: validate, resume, schedule, write, merge, report.

Exactly once: a prompt is done when its line is in a batch file (or its discard record in discarded.jsonl).
Everything else — checkpoint.json, statistics.json, trajectories.jsonl — is derived from those append-only
files and rewritten atomically. So is the exit code: a fresh scan at the end splits the dataset into done,
discarded, failed and not started (`agent.batch.completion`); filters re-apply both ways on start
(`agent.batch.recovery`); statistics.json describes the whole run, this invocation one record of it
(`run_history`). A prompt keeps the prompt_index it was first written with (`agent.store.numbering`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from rich.console import Console

from agent.batch.backend import Backend, BackendFactory, Tally, drive
from agent.batch.capacity import raise_fd_limit
from agent.batch.completion import Completion, note_extra_samples
from agent.batch.dataset import DatasetScan, keyed_units
from agent.batch.dataset_memo import remember
from agent.batch.end_fold import EndFold
from agent.batch.events import Failed, WorkerEvent
from agent.batch.job_feed import every_unit, jobs, planned_rows, until_changed
from agent.batch.keeping import KeepPass, keep_at_end, reapply_filters_and_keep
from agent.batch.monitor import RunMonitor
from agent.batch.planned import PlannedKeys, PlannedUnits
from agent.batch.progress import RunProgress
from agent.batch.recovery import current_discards, withdraw_unkept, write_answer
from agent.batch.rescore import rescore_step
from agent.batch.run_summary import filters_and_budget, run_summary, sample_counts, worker_losses
from agent.batch.tally import Paced, RunTally
from agent.common import heap
from agent.common.stop_signals import stops_held
from agent.config.run_config import RunConfig
from agent.errors import FailureClass
from agent.protocols import KeyBook, RunStore, StoredKeys
from agent.report import RunReport, write_report
from agent.sandboxes import reap_stale
from agent.store.directory import RunDirectory
from agent.store.numbering import Numbering
from agent.store.run_history import with_history
from agent.store.statistics import limit_curve, render_statistics
from agent.store.summary_view import render_next_steps
from agent.store.timeline import Timeline
from agent.store.token_merge import token_capture
from agent.store.unmerged import carry_output_figures

log = logging.getLogger("agent.batch.run")


class BatchRun:
    def __init__(
        self,
        config: RunConfig,
        console: Console,
        store: RunStore | None = None,
        *,
        backend: BackendFactory,  # where prompts run: the CLI edge resolves --backend (agent.backends)
    ) -> None:
        self.config = config
        self.console = console
        self.store: RunStore = store if store is not None else RunDirectory(config.run_dir)
        self.make_backend = backend
        self.tally = RunTally(config.batch_size)  # every counter of this invocation, fed by events
        self.done_keys: set[str] = set()
        self.numbering = Numbering({}, 0)  # the prompt_index of each unit not yet done
        self.monitor: RunMonitor | None = None
        self.timeline = Timeline()
        self.workers: Backend | None = None  # the backend running the prompts, while it runs
        self.tombstoned: set[str] = set()  # keys whose result a filter moved to discarded.jsonl
        self.previous: Any = None  # the statistics.json of the earlier invocations
        self.kept = KeepPass()  # what --keep moved at the end (before the merge)
        self.captured: dict[str, Any] | None = None  # --capture_tokens: tokens.jsonl's counts, merged
        self.fold: EndFold | None = None  # the merged output's figures, counted as lines are written
        self.checkpoints = Paced()  # when checkpoint.json is next rewritten during the run
        self.units: PlannedUnits | None = None  # the dataset's rows as planned, for the completion split
        self.wanted = bytearray()  # per row of the plan: 1 when a unit of it is left to run

    def run(self, scan: DatasetScan) -> int:
        started = time.monotonic()
        raise_fd_limit(self.config.inflight_per_worker, self.config.num_workers)  # workers inherit it
        self.store.lock()
        try:
            if self.config.rescore:  # its files rewritten before anything is appended to them
                rescore_step(self.config, self.store, self.console)
            index = self._open_run()
            remember(self.config.run_dir, scan)
            todo = self._plan(index, scan)
            del index  # the sets of what the directory held: at a million prompts, ~100 MB
            self._start_counting()
            ended = None
            if todo:
                ended = self._schedule(
                    scan, todo, already_done=scan.valid * self.config.samples_per_prompt - todo
                )
            elif not self.config.rescore:
                every = "prompt" if self.config.samples_per_prompt == 1 else "sample of every prompt"
                self.console.print(f"Every {every} of the dataset is already done; merging.")
            with stops_held():  # the end is written whole (agent.common.stop_signals)
                self._checkpoint()
                done = self._finish(scan, started, ended, ran=bool(todo))
        finally:
            self.store.close()
        return done.exit_code

    def _completion(self, ended: Tally | None, merged: KeyBook | None) -> Completion:
        """Each valid prompt's part, from a fresh scan and the keys `merged`, not our counts."""
        return Completion.of(
            self.units if self.units is not None else every_unit(self.config),
            self.store.scan(numbered=False, known=merged),
            self.tally.failed_keys,
            cancelled=self.tally.cancelled_keys,
            merged=merged,
            counted=lambda key, index: self.tally.written.get(key, index) is not None,
            interrupted=ended is not None and ended.interrupted,
            samples_per_prompt=self.config.samples_per_prompt,
            stopped_by=ended.stopped_by if ended is not None else None,
            missing_tokens=None if self.captured is None else self.captured["missing"],
        )

    def _open_run(self) -> StoredKeys:
        for note in self.store.repair():
            log.warning("%s", note)
        for name in reap_stale(self.config.sandbox):  # their owner died: OOM and kill -9 clean nothing up
            log.warning("removed a sandbox left by a dead process: %s", name)
        index = self.store.scan()
        self.tally = RunTally(self.config.batch_size, index.failures, self.config.run_dir)
        # a resume continues the run's figures; a fresh run's directory has no results to add to
        self.previous = self.store.read_json("statistics.json") if self.config.resume else None
        if not self.config.rescore:  # it runs nothing: the record of what the run ran with stays
            self.store.write_json("run_config.json", self.config.public())
        self.tally.withdrawn, self.tally.recovered = reapply_filters_and_keep(self.config, self.store, index)
        self.tombstoned = set(index.tombstoned)
        # not with token sidecars (merged line for line at the end), nor where --keep may withdraw
        # entries from any batch file at the end (every file copied ahead would be dropped)
        ahead = self.config.agent.token_api is None and self.config.verify.keep == "all"
        self.fold = EndFold(self.config.run_dir, self.tally, ahead=ahead)
        return index

    def _start_counting(self) -> None:
        """From the figures the last end kept, where they still hold, then the discards the
        filters moved back into the output: after the plan, whose sets of what the directory
        held (~100 MB at a million prompts) would otherwise be there beside the figures."""
        if self.fold is not None:
            self.fold.recall(self.store)
            self.fold.take(self.store)

    def _plan(self, index: StoredKeys, scan: DatasetScan) -> int:
        """How many units remain; numbers them (`Numbering`) and records which indices
        are already done. The units are the scan's keys (`PlannedUnits`): no second read of
        the dataset, one pass over the keys."""
        if scan.keys is None:
            raise ValueError("a run plans from a scan made with keys=True (scan_dataset)")
        self.units = units = PlannedUnits(scan.keys, self.config.samples_per_prompt)
        self.store.note_keys_in(lambda: PlannedKeys(units))  # the merge's keys, a byte a unit
        self.numbering = numbering = Numbering(index.indices, len(units))
        self.wanted = bytearray(len(scan.keys))  # the rows with a unit left to run
        done, discarded, recorded, plan = index.done, index.discarded, index.indices, self.tally.plan
        todo = 0
        for key, unit_index, _sample in keyed_units(units.rows, units.samples):
            if key in done or key in discarded:
                plan(recorded.get(key, unit_index), done=True, discarded=key not in done)  # (or its row's)
                continue
            todo += 1
            self.wanted[unit_index // units.samples] = 1
            if (number := numbering.claim(key, unit_index)) is not None:
                plan(number, done=False)
        for number in numbering.house_homeless():
            plan(number, done=False)
        self.done_keys = index.done | index.discarded
        note_extra_samples(self.done_keys, self.config.samples_per_prompt)
        return 0 if self.config.rescore else todo  # a rescore runs nothing: --resume runs them

    def _schedule(self, scan: DatasetScan, todo: int, already_done: int) -> Tally:
        if self.config.max_cost is not None and self.config.prices is None:
            log.warning(
                "--max_cost without --price_input/--price_output counts only the costs the endpoint "
                "reports (usage.cost): an endpoint that reports none is never stopped"
            )
        # no more workers than prompts to run: each costs a process start (an interpreter, the
        # model client, a sandbox pool), and fewer workers get more of --max_inflight each
        config = replace(self.config, num_workers=min(self.config.num_workers, todo))
        if self.fold is not None:  # a resume's earlier lines, counted as the answers come
            self.fold.count_earlier(self.store, todo)
        unit = "prompts" if config.samples_per_prompt == 1 else "attempts"  # several samples: attempts
        progress = RunProgress(todo + already_done, already_done, console=self.console, unit=unit)
        self.monitor = RunMonitor(progress, self.timeline, config)
        with progress:
            self.workers = self.make_backend(config, self._on_event, self._tick)
            rows = planned_rows(self.config, scan, self.units, self.wanted)
            feed = jobs(self.config, rows, self.done_keys, self.numbering)
            ended = drive(self.workers, until_changed(feed, self.workers.stop_feeding))
            self.monitor.finish()
            return ended

    def _tick(self) -> None:
        self.checkpoints.tick(self._checkpoint_and_trim, self.store.sync)  # the group commit every tick
        if self.monitor is not None and self.workers is not None:
            self.monitor.tick(len(self.workers.tally.running))

    def _on_event(self, event: WorkerEvent) -> None:
        """Write the answer (before counting it: a count never runs ahead of the disk), count
        it, show it."""
        attempt = self.tally.attempt(event.key) if isinstance(event, Failed) else 0
        write_answer(self.store, event, self.config.batch_size, attempt)
        advance = self.tally.count(event)
        if self.fold is not None:
            self.fold.take(self.store)  # after `count`: the check compares the line with what was counted
            if advance is not None:
                self.fold.answered(self.store)
            self.fold.merge_ahead(self.store)
        if self.monitor is not None:
            self.monitor.show(event, advance)
        self._check_budget(isinstance(event, Failed) and event.error_class == FailureClass.BUDGET)

    def _check_budget(self, cut: bool) -> None:
        """At --max_cost, start no new prompt: the hub (`agent.llm.shared_limit`) already starts
        no model call, so the prompts in flight fail as `budget` (`cut`), for --resume."""
        budget = self.config.max_cost
        if budget is None or self.workers is None or (self.tally.stats.cost_usd < budget and not cut):
            return
        if self.workers.tally.stopped_by is None:
            log.warning("--max_cost=%g reached: no model call starts; cut prompts fail as budget", budget)
            self.workers.stop_feeding("max_cost")

    def _checkpoint_and_trim(self) -> None:
        """The paced checkpoint, and the heap's free pages given back (`heap.trim`): the
        parent's RSS follows what it holds, not what it parsed."""
        self._checkpoint()
        heap.trim()

    def _checkpoint(self) -> None:
        """Group commit: write_json makes the appended lines durable before describing them."""
        checkpoint = self.tally.checkpoint(self.config.run_name, listed=False)
        if self.config.samples_per_prompt > 1:  # completed_prompts then lists attempts' prompt_index
            checkpoint["samples_per_prompt"] = self.config.samples_per_prompt
        self.store.write_json("checkpoint.json", checkpoint, ("completed_prompts", self.tally.done_indices))

    def _finish(self, scan: DatasetScan, started: float, ended: Tally | None, *, ran: bool) -> Completion:
        """Merge (unless interrupted), split the dataset by what is on disk, and write
        statistics.json and the report for the whole run."""
        summary = run_summary(self.config, scan, time.monotonic() - started)
        report = RunReport(self.config.run_dir)  # unmerged: read from the batch files
        merged_keys: KeyBook | None = None
        checked: dict[str, Any] = {}
        if ended is None or not ended.interrupted:
            self.kept, self.tombstoned = keep_at_end(self.config, self.store)
            self.tally.withdrawn += self.kept.withdrawn
            self.tally.recovered += self.kept.recovered
            merged_keys, checked, report = self._merge(summary)
        else:  # not merged: the output's figures are not counted (the fold's are dropped)
            self.tally.stats.reset_output()
        done = self._completion(ended, merged_keys)
        moved = {"recovered_discards": self.tally.recovered, "withdrawn_entries": self.tally.withdrawn}
        current = report.current_discards(merged=merged_keys is not None)
        extra = {
            **sample_counts(self.config, scan),
            "completion": done.as_dict(),
            "merged": merged_keys is not None,
            **filters_and_budget(self.config, (current, report.entries), moved, ended),
            **worker_losses(ended),
            **checked,
            "keep": self.kept.section(self.config.verify.keep) if merged_keys is not None else None,
            "current_discards": current,
        }
        self.tally.stats.limit_history = limit_curve(ended.limit_history if ended else [], started)
        stats = self.tally.stats.to_dict(**summary, extra={**extra, "timeline": self.timeline.to_dict()})
        stats["rate_limiting"]["partial"] = bool(ended is not None and ended.dead_workers)
        carry_output_figures(stats, self.previous, self.config.run_dir, merged=merged_keys is not None)
        stats = with_history(stats, self.previous, ran=ran)
        stats["tokens"].update(self.captured or {})  # beside the usage counts, only with capture
        self.store.write_json("statistics.json", stats)
        render_statistics(stats, self.console)
        trajectories = self.config.run_dir / "trajectories.jsonl" if merged_keys is not None else None
        render_next_steps(stats, self.console, trajectories=trajectories, report=write_report(report, stats))
        return done

    def _merge(self, summary: dict[str, Any]) -> tuple[KeyBook, dict[str, Any], RunReport]:
        """Merge trajectories.jsonl (its `merge` section into `summary`); the keys written, the
        `merge_check` section (this invocation's entries against what it counted) and the
        report of the merged output."""
        fold = self.fold if self.fold is not None else EndFold(self.config.run_dir, self.tally)
        merged = fold.merge(self.config, self.store, self.tombstoned)
        self.tally.withdrawn += withdraw_unkept(self.config, self.store, merged.unkept)
        summary["merge"] = merged.as_dict()
        self.captured = token_capture(self.config.agent.token_api, merged.tokens, self.previous)
        for entry in current_discards(self.config.run_dir, merged.kept_keys):
            self.tally.stats.add_discarded_entry(entry)
        moved = {key for key, _entry in merged.unkept} | self.kept.withdrawn_keys
        fold.report.output_keys(merged.kept_keys)
        return merged.kept_keys, {"merge_check": fold.check.report(merged.kept_keys, moved)}, fold.report
