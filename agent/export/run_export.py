"""Exporting a run directory: one streaming pass over `trajectories.jsonl` feeds every format.

Each file is written whole or not at all (`agent.store.durable.atomic_write`: a temp file,
fsynced, renamed over the old one), so a failed or interrupted export leaves the previous
export, and the run's own files, as they were. Memory stays bounded: one entry at a time,
plus one Parquet row group (`agent.export.exports.ROW_GROUP`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from agent.errors import ConfigError
from agent.export.exports import EXPORT_DIR, EXPORTS, ExportFormat, RowWriter
from agent.store.durable import atomic_write
from agent.store.jsonl import parse_object
from agent.store.layout import TRAJECTORIES_FILE

__all__ = ["ExportReport", "export_files", "export_run"]


@dataclass(frozen=True)
class ExportReport:
    entries: int
    files: dict[str, Path]  # format name → the file written
    seconds: float


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
    (run_dir / directory).mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        writers: list[RowWriter] = []
        for name, path in files.items():
            writers.append(formats[name].opens(stack.enter_context(atomic_write(path)), inline))
        entries = _feed(source, writers)
        for writer in writers:
            writer.close()
    return ExportReport(entries, files, time.monotonic() - started)


def _feed(source: Path, writers: list[RowWriter]) -> int:
    """Hand every entry of `source` to every writer; the number of entries."""
    entries = 0
    with source.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            entry = parse_object(line)
            if entry is None:
                raise ConfigError(f"{source}:{number}: not a JSON object; the export was not written")
            try:
                for writer in writers:
                    writer.write(entry)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{source}:{number}: cannot export this entry: {exc}") from None
            entries += 1
    return entries
