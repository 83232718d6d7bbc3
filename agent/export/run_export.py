"""Exporting a run directory: one streaming pass over `trajectories.jsonl` feeds every format.

Each file is written whole or not at all (`agent.store.durable.atomic_write`: a temp file,
fsynced, renamed over the old one), so a failed or interrupted export leaves the previous
export, and the run's own files, as they were. Memory stays bounded: one entry at a time,
plus one Parquet row group (`agent.export.exports.ROW_GROUP`).

Exports load any run: an entry can hold a lone surrogate (a `\ud800` escape in a tool call's
arguments is valid JSON), which no UTF-8 file can carry; each such character is replaced with
U+FFFD in that entry's rows (`agent.export.exports`) and counted (`ExportReport.replaced`); the
run's files keep it. Only lines that may hold one (`may_hold_surrogates`) are searched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from agent.common.unicode_text import may_hold_surrogates
from agent.errors import AgentError, ConfigError
from agent.export.exports import EXPORT_DIR, EXPORTS, ExportFormat, ExportInput, RowWriter
from agent.store.durable import atomic_write
from agent.store.jsonl import parse_object
from agent.store.layout import TRAJECTORIES_FILE

__all__ = ["ExportReport", "ExportWriteError", "NothingToExport", "export_files", "export_run"]

KEPT = "the run's files, and each export file not rewritten whole, are as they were"


class ExportWriteError(AgentError):
    """An export could not be written: a full disk, a directory in the way (exit 1)."""


class NothingToExport(ConfigError):
    """The run has no entries: `datasets` loads no file of 0 rows, so none is written (exit 2)."""


@dataclass(frozen=True)
class ExportReport:
    entries: int
    files: dict[str, Path]  # format name → the file written
    seconds: float
    replaced: int = 0  # characters UTF-8 cannot carry (lone surrogates), replaced with U+FFFD
    replaced_entries: int = 0  # the entries that held them

    def replaced_line(self) -> str | None:
        """One line for the operator when characters were replaced, else None."""
        if not self.replaced:
            return None
        chars = "character" if self.replaced == 1 else "characters"
        entries = "entry" if self.replaced_entries == 1 else "entries"
        return (
            f"{self.replaced} {chars} that UTF-8 cannot carry (lone surrogates) in {self.replaced_entries} "
            f"{entries} written as U+FFFD in the exports; trajectories.jsonl keeps them as escapes"
        )


def export_files(
    run_dir: Path,
    names: tuple[str, ...],
    formats: Mapping[str, ExportFormat] = EXPORTS,
    directory: str = EXPORT_DIR,
) -> dict[str, Path]:
    """Where each named export of `run_dir` is (or would be) written."""
    return {name: run_dir / directory / formats[name].file_name for name in names}


def export_run(
    run_dir: Path,
    names: tuple[str, ...],
    *,
    inline: bool = False,
    formats: Mapping[str, ExportFormat] = EXPORTS,
    directory: str = EXPORT_DIR,
) -> ExportReport:
    """Write the exports `names` (of `formats`) of the run in `run_dir`, from its
    `trajectories.jsonl`, into `directory` of it; ConfigError names the file and line of an
    entry that cannot be exported."""
    source = run_dir / TRAJECTORIES_FILE
    if not source.is_file():
        raise ConfigError(f"{source}: no merged trajectories to export (is this a run directory?)")
    started = time.monotonic()
    files = export_files(run_dir, names, formats, directory)
    for path in files.values():  # before any file is written: the old ones all stay
        if path.is_dir():
            raise ExportWriteError(f"{path}: a directory, where the export file goes; {KEPT}")
    try:
        with _made(run_dir / directory):
            fed = _write(source, files, formats, ExportInput(run_dir, inline))
    except OSError as exc:  # a full disk, a file where the export directory goes, …
        where = exc.filename2 or exc.filename or run_dir / directory
        raise ExportWriteError(f"{where}: {exc.strerror}; {KEPT}") from None
    return ExportReport(fed.entries, files, time.monotonic() - started, fed.replaced, fed.replaced_entries)


@contextmanager
def _made(directory: Path) -> Iterator[None]:
    """`directory`, made if missing, and removed again if the export it was made for failed
    (a run with no entries to export was left an empty `export/`); rmdir removes no file."""
    made = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if made:
            with suppress(OSError):  # not empty (a file put there meanwhile): it stays
                directory.rmdir()
        raise


def _write(
    source: Path, files: Mapping[str, Path], formats: Mapping[str, ExportFormat], given: ExportInput
) -> _Fed:
    """Write every file of `files` from the entries of `source`, each whole or not at all."""
    with ExitStack() as stack:
        writers: list[RowWriter] = []
        for name, path in files.items():
            writer = formats[name].opens(stack.enter_context(atomic_write(path)), given)
            stack.push(_closing(writer))  # before its file is renamed into place, or discarded
            writers.append(writer)
        fed = _feed(source, writers)
        if not fed.entries:  # `datasets` loads no file of 0 rows, JSON Lines or Parquet
            nothing = "no entries to export (every prompt failed or was discarded)"
            raise NothingToExport(f"{source}: {nothing}; no export file was written")
    return fed


def _closing(writer: RowWriter) -> Callable[..., bool]:
    """Close `writer` when the export succeeded; else discard what it holds, so a failed
    export leaves no writer for the collector to close (pyarrow's `ParquetWriter.__del__`
    then wrote to the closed file and printed an "Exception ignored" traceback)."""

    def exit_(exc_type: type[BaseException] | None, *_: object) -> bool:
        if exc_type is None:
            writer.close()
        else:
            writer.discard()
        return False

    return exit_


@dataclass
class _Fed:
    entries: int = 0
    replaced: int = 0
    replaced_entries: int = 0


def _feed(source: Path, writers: list[RowWriter]) -> _Fed:
    """Hand every entry of `source` to every writer, made encodable; what was fed."""
    fed = _Fed()
    with source.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            entry = parse_object(line)
            if entry is None:
                raise ConfigError(f"{source}:{number}: not a JSON object; the export was not written")
            suspect = may_hold_surrogates(line)
            try:
                replaced = max(writer.write(entry, suspect) for writer in writers)  # the same text in each
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{source}:{number}: cannot export this entry: {exc}") from None
            fed.replaced += replaced
            fed.replaced_entries += replaced > 0
            fed.entries += 1
    return fed
