"""Writing `report.html` for a run directory: the entries come either from the run's merge
(`add_entry`, one pass for statistics and report) or, on demand, from the files: the merged
`trajectories.jsonl`, or the batch files when the last run was interrupted before merging
(first line per prompt, as the merge would keep). Discards and failures are read from their
logs. The page is replaced atomically and passes the process's secret redactor.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agent.common.redaction import active
from agent.protocols.store import KnownKeys
from agent.report.digest import RunDigest
from agent.report.page import render
from agent.report.sample import SAMPLE_SIZE
from agent.store.durable import atomic_write
from agent.store.index import last_records, scan_run
from agent.store.jsonl import read_lines
from agent.store.key_book import KeySet
from agent.store.keys import KeyResolver, is_tombstone
from agent.store.layout import DISCARDED_FILE, FAILURES_FILE, STATISTICS_FILE, TRAJECTORIES_FILE, batch_files

REPORT_FILE = "report.html"
log = logging.getLogger("agent.report")


def read_statistics(run_dir: Path) -> dict[str, Any]:
    """statistics.json, or {} when it is missing or unreadable (the report still shows the entries)."""
    try:
        value = json.loads((run_dir / STATISTICS_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("%s: not used for the report (%s)", run_dir / STATISTICS_FILE, exc)
        return {}
    if not isinstance(value, dict):
        return {}
    wrong = next(
        (name for name in _SECTIONS if value.get(name) is not None and not isinstance(value[name], dict)),
        None,
    )
    if wrong is not None:  # edited by hand: the run writes it again on --resume
        log.warning("%s: not used for the report (its %r is not an object)", run_dir / STATISTICS_FILE, wrong)
        return {}
    return value


# statistics.json's sections the report reads as objects
_SECTIONS = (
    "completion",
    "cost",
    "rate_limiting",
    "this_invocation",
    "timeline",
    "tokens",
    "verification",
    "whole_run",
)


def unmerged_entries(run_dir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The batch files' entries and their keys, first line per prompt key (tombstones, the
    results they withdrew and bad lines skipped)."""
    resolver, seen = KeyResolver(), set(scan_run(run_dir).tombstoned)
    for path in batch_files(run_dir):
        for _, entry in read_lines(path):
            key = resolver.result_key(entry) if entry is not None else None
            if entry is not None and key is not None and key not in seen and not is_tombstone(entry):
                seen.add(key)
                yield key, entry


def merged_entries(path: Path) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """trajectories.jsonl's entries and their keys, as the merge found them (a line without
    `metadata.prompt_key` keyed by its prompt's text)."""
    resolver = KeyResolver()
    for _, entry in read_lines(path):
        if entry is not None:
            yield resolver.result_key(entry), entry


class RunReport:
    """The report of the run in `run_dir`."""

    def __init__(self, run_dir: Path, sample_size: int = SAMPLE_SIZE) -> None:
        """Fed entries (`add_entry`), it is told the output's keys (`output_keys`) before
        `write`; else it reads both from the files, keyed as the merge keys them."""
        self.run_dir = Path(run_dir)
        self.digest = RunDigest(sample_size, keyed=False)
        self._fed = False
        self._records_read = False

    def output_keys(self, keys: KnownKeys) -> None:
        """The keys of the output's entries (the merge's), for a report fed `keyed=False`."""
        self.digest.output_keys = keys

    def add_entry(self, entry: dict[str, Any]) -> None:
        """One entry of the output, as the merge writes it."""
        self._fed = True
        self.digest.add_entry(entry)

    def recalled(self) -> None:
        """The digest holds figures counted before (`agent.store.output_figures`): the entries
        are fed, not read from the files."""
        self._fed = True

    def _read_entries(self, merged: bool) -> None:
        output = self.run_dir / TRAJECTORIES_FILE
        if not merged or not output.exists():
            entries: Iterator[tuple[str | None, dict[str, Any]]] = unmerged_entries(self.run_dir)
        else:
            entries = merged_entries(output)
        keys = KeySet()
        for key, entry in entries:
            self.digest.add_entry(entry)
            if key is not None:
                keys.add(key)
        self.output_keys(keys)

    @property
    def entries(self) -> int:
        """The output's entries read or fed so far (after `current_discards`: all of them)."""
        return self.digest.entries

    def current_discards(self, *, merged: bool) -> dict[str, int]:
        """The discards of the run directory now (prompts not in the output), by each one's
        last reason (`merged`: whether trajectories.jsonl is this run's output)."""
        self._read_records(merged)
        return dict(sorted(self.digest.discards.items()))

    def _read_records(self, merged: bool) -> None:
        """The output's entries unless fed, then discarded.jsonl and failures.jsonl: once."""
        if self._records_read:
            return
        if not self._fed:
            self._read_entries(merged)
            self._fed = True
        for discard in last_records(self.run_dir / DISCARDED_FILE):  # a prompt's current reason, once
            self.digest.add_discard(discard)
        for _, record in read_lines(self.run_dir / FAILURES_FILE):
            if record is not None:
                self.digest.add_failure(record)
        self._records_read = True

    def write(self, stats: Mapping[str, Any] | None = None, output: Path | None = None) -> Path:
        """Write the page (to `output`, by default `report.html` in the run directory)."""
        stats = read_statistics(self.run_dir) if stats is None else stats
        self._read_records(merged=stats.get("merged") is not False)
        page = render(stats, self.digest).encode("utf-8", "replace")
        path = output if output is not None else self.run_dir / REPORT_FILE
        with atomic_write(path) as handle:
            handle.write(active().redact_bytes(page))
        return path
