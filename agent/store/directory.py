"""The run directory `data/<run_name>/`: its lock, its append-only logs and its JSON files.

Only the parent process writes here, and every byte it writes passes the process's secret
redactor (`agent.common.redaction`). `RunDirectory` is the one door: it takes the lock,
repairs what a crash left (`agent.store.durable`), appends results, discards and failures
(`agent.store.appender`), scans what is done (`agent.store.index`), replaces JSON files
atomically and merges the output (`agent.store.merge`). `write_json` and `merge` sync the logs
first, so a checkpoint or a merged file never claims a line that is not on disk.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from agent.common.redaction import Redactor, active
from agent.protocols.store import KeyBook, KnownKeys
from agent.store import run_lock
from agent.store.appender import MAX_OPEN_FILES, Appender
from agent.store.durable import TEMP_SUFFIX, atomic_write, repair_last_line
from agent.store.index import RunIndex, scan_run
from agent.store.jsonl import checked_line, document_pieces, encode_line, parse_object
from agent.store.key_book import KeySet
from agent.store.layout import (
    BATCH_GLOB,
    DISCARDED_FILE,
    FAILURES_FILE,
    TRAJECTORIES_FILE,
    batch_file_name,
    file_size,
    tokens_file_name,
)
from agent.store.merge import merge_run
from agent.store.merge_ahead import MergeAhead
from agent.store.merge_report import MergeReport
from agent.store.output_base import OutputBase
from agent.store.records_file import load_records, remove_all, save_all
from agent.store.shard_index import Line, ShardChanged, ShardRecords
from agent.store.token_merge import withheld_line

# encode_line, RunIndex and MergeReport are re-exported: callers import them from here.
__all__ = ["MergeReport", "RunDirectory", "RunIndex", "encode_line"]

logger = logging.getLogger(__name__)


class RunDirectory:
    """One run's directory. Call `lock()` then `repair()` before the first append."""

    def __init__(
        self, path: Path, max_open_files: int = MAX_OPEN_FILES, redactor: Redactor | None = None
    ) -> None:
        self.path = Path(path)
        # Every byte written here passes it: results, discards, failures and JSON files.
        self._redactor = active() if redactor is None else redactor
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fd: int | None = None
        self._logs = Appender(self.path, max_open_files)
        # the result lines this process appends, so the end of the run reads none of them again
        self.records = ShardRecords()
        self._appended: list[tuple[dict[str, Any], Line]] = []  # since the last `take_appended`
        self._records_removed = False  # the saved records, once they can no longer be trusted
        self._ahead: MergeAhead | None = None  # trajectories.jsonl's first files, copied ahead
        self._new_book: Callable[[], KeyBook] = KeySet  # where each merge notes the keys it writes
        self.output_base: OutputBase | None = None  # the output to continue (`EndFold.recall`)

    # ------------------------------------------------------------ lifecycle

    def lock(self) -> None:
        """Take the run's exclusive lock (`agent.store.run_lock`); another holder →
        RunLockedError naming its pid."""
        if self._lock_fd is None:
            self._lock_fd = run_lock.take(self.path)

    def close(self) -> None:
        """Sync and close the logs, then release the lock. Safe to call twice."""
        try:
            self.sync()
        finally:
            self._logs.close()
            if self._ahead is not None:  # not merged (interrupted, failed): never renamed
                self._ahead.drop()
            if self._lock_fd is not None:
                fd, self._lock_fd = self._lock_fd, None
                run_lock.release(fd)

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def repair(self) -> list[str]:
        """Make every `*.jsonl` end on a whole line (`agent.store.durable`'s torn-line rule) and
        remove temp files a crash left behind. Returns one note per change. Needs the lock: the
        temp files of a live runner must not be removed."""
        if self._lock_fd is None:
            raise RuntimeError("repair() needs the run lock: call lock() first")
        self.sync()
        self._logs.close()
        notes = []
        for temp in sorted(self.path.glob(f".*{TEMP_SUFFIX}")):
            temp.unlink(missing_ok=True)
            notes.append(f"{temp.name}: removed a temp file left by an interrupted write")
        for path in sorted(self.path.glob("*.jsonl")):
            with path.open("r+b") as handle:
                note = repair_last_line(handle, path)
            if note:
                notes.append(note)
        if self.records.shards and not self.records.unchanged(self.path):
            self.records = ShardRecords()  # rewritten since they were loaded (--rescore): again
        if self.records.usable and not self.records.shards:
            load_records(self.path, self.records)
        return notes

    # ------------------------------------------------------------ reading

    def has_results(self) -> bool:
        names = [p.name for p in self.path.glob(BATCH_GLOB)] + [DISCARDED_FILE, FAILURES_FILE]
        return any(file_size(self.path / name) > 0 for name in names)

    def scan(self, *, numbered: bool = True, known: KnownKeys | None = None) -> RunIndex:
        return scan_run(self.path, self._trusted(), numbered=numbered, known=known)

    def note_keys_in(self, new_book: Callable[[], KeyBook]) -> None:
        """Each merge notes the keys it writes in a new book of `new_book`'s (`agent.batch.planned`)."""
        self._new_book = new_book

    def _trusted(self) -> ShardRecords | None:
        """The records, while every shard they describe is as this process left it."""
        if self.records.usable and not self.records.unchanged(self.path):
            self.forget_records()
        return self.records if self.records.usable else None

    def forget_records(self) -> None:
        """Read every batch file whole from now on (a shard changed under us, or a fold failed)."""
        self.records.forget()
        self._appended.clear()
        self._remove_records()

    def _remove_records(self) -> None:
        if not self._records_removed:
            remove_all(self.path)
            self._records_removed = True

    def take_appended(self) -> list[tuple[dict[str, Any], Line]]:
        """The result lines appended (parsed as written) since the last call, with their records."""
        taken, self._appended = self._appended, []
        return taken

    def read_json(self, name: str) -> Any | None:
        """The parsed file, or None when it is missing or corrupt (corrupt is logged)."""
        try:
            return json.loads((self.path / _plain(name)).read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            logger.warning("%s: ignoring a corrupt file (%s)", self.path / name, exc)
            return None

    # ------------------------------------------------------------ writing

    def append_result(self, batch_num: int, entry: Mapping[str, Any] | bytes) -> None:
        """Append a result: a mapping, or a line already made by `encode_line` (workers encode
        their entries, so the parent neither unpickles nor re-encodes them)."""
        path = self.path / batch_file_name(batch_num)
        encoded = entry if isinstance(entry, bytes) else encode_line(entry)
        offset, data = self._append(path, encoded)
        if self.records.usable:
            # a mapping written as it was encoded is its own parse (a large one costs as much to
            # parse as to encode); a worker's line, or one the redactor changed, is parsed
            parsed = dict(entry) if not isinstance(entry, bytes) and data == encoded else parse_object(data)
            line = self.records.add(path, offset, data, parsed)
            if line is not None and parsed is not None:
                self._appended.append((parsed, line))

    def append_tokens(self, batch_num: int, line: bytes, entry: bytes) -> None:
        """Append an entry's token sidecar line (`TokenRecord.line()`) to `tokens_<batch_num>.jsonl`,
        before the entry's own line (`entry`, as it is handed to be written): a line no entry
        names is never merged, an entry whose tokens are not on disk would be.

        The line is not passed through the redactor byte by byte: it holds ids, logprobs and the
        entry's key, and a numeric secret's digits can sit inside a logprob by chance (replaced,
        the line would no longer parse). What a secret looks like as ids only the tokenizer
        knows: when the entry's own text holds one, its ids would carry it, so the line written
        is the record without ids, marked `withheld` (`withheld_line`)."""
        if self._redactor and self._redactor.redact_bytes(entry) != entry:
            line = self._redactor.redact_bytes(withheld_line(line))
        self._logs.append(self.path / tokens_file_name(batch_num), checked_line(line))

    def append_discard(self, record: Mapping[str, Any]) -> None:
        self._append(self.path / DISCARDED_FILE, record)

    def append_failure(self, record: Mapping[str, Any]) -> None:
        self._append(self.path / FAILURES_FILE, record)

    def sync(self) -> None:
        """fsync every file appended to since the last sync, and the directory if it gained names."""
        self._logs.sync()

    def write_json(self, name: str, data: Any, long_list: tuple[str, Iterable[int]] | None = None) -> None:
        """Replace `name` atomically (`write_pieces`) with `data`; `long_list`: a key whose list of
        ints is written last, a chunk at a time (`document_pieces`)."""
        self.write_pieces(name, document_pieces(data, long_list))

    def write_pieces(self, name: str, pieces: Iterable[bytes]) -> None:
        """Replace `name` atomically with `pieces`, after syncing the logs it may refer to and
        saving the records of their lines (`agent.store.records_file`: what a resume loads)."""
        self.sync()
        self._save_records()
        with atomic_write(self.path / _plain(name)) as handle:
            for piece in pieces:
                handle.write(self._redactor.redact_bytes(piece))

    def merge(
        self,
        valid_tools: Collection[str],
        on_entry: Callable[[dict[str, Any]], None] | None = None,
        output: str = TRAJECTORIES_FILE,
        exclude: Collection[str] = (),
        keep_unknown: bool = True,
        counted: bool = False,
    ) -> MergeReport:
        """`merge_run`; with `counted`, the caller counted the lines this process appended
        (`take_appended`): they are not parsed again, and ShardChanged is raised when they (or the
        saved records loaded at the start) can no longer be trusted; without, every line is read."""
        self.sync()
        ahead, self._ahead = self._ahead, None
        records = self._trusted() if counted else None
        if ahead is not None and (records is None or _plain(output) != TRAJECTORIES_FILE):
            ahead.drop()
            ahead = None
        if counted and records is None:
            raise ShardChanged("a batch file changed since this run appended to it")
        plain = _plain(output)
        base = self.output_base if plain == TRAJECTORIES_FILE else None
        rest = (records, counted, ahead, self._new_book, base)
        return merge_run(self.path, valid_tools, on_entry, plain, exclude, keep_unknown, *rest)

    def merge_ahead(self, batch_num: int, valid_tools: Collection[str]) -> bool:
        """Copy batch `batch_num`'s file, whose prompts are all answered, into trajectories.jsonl
        ahead of the end (`agent.store.merge_ahead`), the files before it copied already; False
        once a file cannot be (none after it can then). A batch without a file is passed over."""
        path = self.path / batch_file_name(batch_num)
        if not self.records.usable:
            return False
        if not path.exists():
            return True
        if self._ahead is None:
            self._ahead = MergeAhead.after_base(self.path, self._new_book(), self.output_base, self.records)
        return self._ahead.add(path, self.records.of(path), valid_tools)

    def _save_records(self) -> None:
        if not self.records.usable:  # a line could not be recorded: a resume reads the files
            self._remove_records()
            return
        save_all(self.path, self.records)

    def _append(self, path: Path, record: Mapping[str, Any] | bytes) -> tuple[int, bytes]:
        """Append one line; the offset it starts at and the bytes written."""
        # Serialise first: a record that cannot be encoded leaves no partial line behind.
        data = checked_line(record) if isinstance(record, bytes) else encode_line(record)
        data = self._redactor.redact_bytes(data)
        return self._logs.append(path, data), data


def _plain(name: str) -> str:
    """A bare file name inside the run directory (never a path that could leave it)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")
    return name
