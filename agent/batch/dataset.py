"""The prompt dataset: validating its rows and streaming the valid ones, from a JSONL file
(line by line, here), a Parquet file (`agent.batch.dataset_sources`), a `datasets` directory or
an `hf://datasets/...` dataset (`agent.batch.dataset_hub`); --prompt_field and --field_map say
which columns are the row fields (`agent.batch.row_columns`).

Two passes over the dataset, both streamed: `scan_dataset` validates every line up front (so a
bad dataset is reported before a token is spent) and, asked, keeps each valid row's key for the
run's plan; `iter_rows` then yields the valid rows in file order. Neither holds the file in
memory; both keep only the number of copies seen of each prompt hash
(`agent.batch.dataset_copies`), which gives each copy of a repeated prompt its own key.

Blank lines are skipped silently; every other line is a row or an error (reported with its
line number, then skipped) by the rules of `agent.batch.row_fields`; a Parquet or `datasets`
row by the same rules, reported as `FILE:row N` (1-based).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.batch.dataset_copies import CopyCounter, RowKeys
from agent.batch.dataset_hub import HUB_PREFIX, DiskSource, HubSource, is_datasets_directory, split_directory
from agent.batch.dataset_jsonl import JsonlSource
from agent.batch.dataset_source import CHANGED, Source, where
from agent.batch.dataset_source import LineError as LineError  # where it always was, for callers
from agent.batch.dataset_sources import ParquetSource, is_parquet
from agent.batch.row_columns import ColumnMap
from agent.batch.row_fields import LineFields
from agent.batch.row_verify import RowVerify
from agent.config.dataset_config import DatasetOptions
from agent.config.sampling import Sampling
from agent.errors import ConfigError, DatasetError
from agent.store.keys import copy_key, prompt_hash, sample_key, split_key

MAX_KEPT_ERRORS = 1000


@dataclass(frozen=True)
class DatasetRow:
    index: int  # position among valid rows (0-based), after max_samples
    line_no: int  # 1-based line in the file
    prompt: str
    key: str  # prompt_key(prompt, occurrence)
    occurrence: int  # 0 for the first copy of this prompt text in the file, 1 for the second…
    image: str | None  # `image`, else `docker_image`
    cwd: str | None
    metadata: dict[str, Any]
    sampling: Sampling | None = None  # the row's `sampling` choices
    verify: RowVerify | None = None  # the row's `verify` checks (agent.batch.row_verify)
    sample_index: int = 0  # which attempt at the row's prompt this unit of work is (`iter_units`)

    @classmethod
    def of(cls, index: int, line_no: int, record: LineFields, digest: str, occurrence: int) -> DatasetRow:
        """Row `index` (line `line_no`) of the dataset, its fields `record`, the `occurrence`th
        copy of the prompt whose hash is `digest`."""
        return cls(
            index=index,
            line_no=line_no,
            prompt=record.prompt,
            key=copy_key(digest, occurrence),
            occurrence=occurrence,
            image=record.image,
            cwd=record.cwd,
            metadata=record.metadata,
            sampling=record.sampling,
            verify=record.verify,
        )

    @property
    def prompt_id(self) -> str:
        """The prompt's identity, the same for all its samples (sample 0's key)."""
        return split_key(self.key)[0]


@dataclass
class DatasetScan:
    path: str
    total_lines: int  # every line of the file, blank ones included
    valid: int  # rows `iter_rows` will yield (after max_samples)
    errors: list[LineError]  # the first MAX_KEPT_ERRORS errors
    error_count: int = 0  # all errors, kept or not
    truncated: int = 0  # valid rows left out by max_samples
    without_image: int = 0  # valid rows (of the `valid` ones) that name no image: the run's default
    with_verify: int = 0  # valid rows (of the `valid` ones) with a `verify` object
    noun: str = "lines"  # what total_lines counts: a JSONL file's lines, or rows
    keys: RowKeys | None = None  # with `keys=True`: the key of each of the `valid` rows, in order
    identity: str | None = None  # what the scan depended on (`agent.batch.dataset_memo`), if known
    recalled: bool = False  # remembered from an earlier invocation, not read now (`dataset_memo`)


def _check_max_samples(max_samples: int | None) -> None:
    if max_samples is None:
        return
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1:
        raise ConfigError(f"--max_samples must be a positive integer, got {max_samples!r}")


def open_source(path: str | Path, options: DatasetOptions | None = None) -> Source:
    """The source --dataset_file names: `hf://datasets/...`, a `datasets` directory, a Parquet
    file (by its magic bytes), else a JSONL file."""
    options = options if options is not None else DatasetOptions()
    columns = ColumnMap.of(options)
    if isinstance(path, str) and path.startswith(HUB_PREFIX):
        return HubSource(path, columns, options.commit or options.revision)
    if isinstance(path, str) and (named := split_directory(path)) is not None:
        return DiskSource(named[0], columns, named[1])
    path = Path(path)
    if path.is_dir() and is_datasets_directory(path):
        return DiskSource(path, columns)
    if is_parquet(path) or (path.suffix.lower() == ".parquet" and path.is_file()):
        return ParquetSource(path, columns)  # one named .parquet without its magic: "not a Parquet file"
    return JsonlSource(path, columns)


def check_readable(path: str | Path, options: DatasetOptions | None = None) -> None:
    """A DatasetError unless `path` is a dataset this process can open (checked before anything
    that depends on the rest of the configuration: a typo in the name is the first thing to fix)."""
    open_source(path, options).check()


def place(path: str | Path, options: DatasetOptions | None, number: int) -> str:
    """How a message names line (or row) `number` of the dataset: FILE:12 or FILE:row 12."""
    return where(open_source(path, options), number)


def scan_dataset(
    path: str | Path,
    max_samples: int | None = None,
    *,
    require_valid: bool = True,
    backend: str | None = None,
    options: DatasetOptions | None = None,
    keys: bool = False,
) -> DatasetScan:
    """Validate every line (or row) of the dataset (first pass). Raises DatasetError when it
    cannot be read or (with `require_valid`) has no valid row. A caller that reports the bad
    lines itself passes `require_valid=False` and calls `require_valid_rows`. With the run's
    sandbox `backend` (its name), a row asking for an image or cwd that backend cannot run as
    asked is a bad line; pass the same `backend` and `options` to `iter_rows`. With `keys`,
    `scan.keys` holds the key `iter_rows` gives each valid row."""
    _check_max_samples(max_samples)
    source = open_source(path, options)
    scan = DatasetScan(path=source.name, total_lines=0, valid=0, errors=[], noun=source.noun)
    kept, seen = RowKeys() if keys else None, CopyCounter()
    valid_total = 0
    for line_no, record in source.records(backend):
        scan.total_lines = line_no
        if isinstance(record, LineError):
            scan.error_count += 1
            if len(scan.errors) < MAX_KEPT_ERRORS:
                scan.errors.append(record)
        elif record is not None:
            if max_samples is None or valid_total < max_samples:
                scan.without_image += record.image is None
                scan.with_verify += record.verify is not None
                if kept is not None:
                    digest = prompt_hash(record.prompt)
                    kept.append(digest, seen.see(digest))
            valid_total += 1
    scan.keys = kept
    scan.valid = valid_total if max_samples is None else min(valid_total, max_samples)
    scan.truncated = valid_total - scan.valid
    if require_valid:
        require_valid_rows(scan)
    return scan


def require_valid_rows(scan: DatasetScan) -> None:
    """DatasetError when the scan found no usable row."""
    if scan.valid == 0:
        raise DatasetError(_no_valid_row_message(scan))


def _no_valid_row_message(scan: DatasetScan) -> str:
    if scan.error_count == 0:
        return f"{scan.path}: no valid row (the {'file' if scan.noun == 'lines' else 'dataset'} is empty)"
    return (
        f"{scan.path}: no valid row ({scan.error_count} invalid of {scan.total_lines} {scan.noun}; "
        f"first: {scan.errors[0]})"
    )


def iter_rows(
    path: str | Path,
    max_samples: int | None = None,
    *,
    backend: str | None = None,
    options: DatasetOptions | None = None,
) -> Iterator[DatasetRow]:
    """Stream the valid rows in order (second pass); invalid ones are skipped. `backend` and
    `options` must be those `scan_dataset` was given, or the rows would not match its count."""
    _check_max_samples(max_samples)
    seen = CopyCounter()  # prompt hash -> copies seen so far, packed
    index = 0
    for line_no, record in open_source(path, options).records(backend):
        if not isinstance(record, LineFields):
            continue
        if max_samples is not None and index >= max_samples:
            return
        digest = prompt_hash(record.prompt)
        occurrence = seen.see(digest)
        yield DatasetRow.of(index, line_no, record, digest, occurrence)
        index += 1


def iter_wanted_rows(
    path: str | Path,
    scan: DatasetScan,
    *,
    backend: str | None,
    options: DatasetOptions | None,
    row_key: Callable[[int], str],
    wanted: Callable[[int], bool],
) -> Iterator[DatasetRow] | None:
    """`iter_rows` of `path` (scanned as `scan`) where only the rows `wanted` (by index) are
    parsed, the others passed by their bytes (issue 26: a resume reaches its first pending row
    of a million-row file without parsing the rows before it). Each row's key is the scan's
    (`row_key(index)`); a row whose prompt no longer has it raises DatasetError. The rows are
    the scan's `valid` ones: one appended since is left for the next --resume. None (use
    `iter_rows`) unless the dataset is a JSONL file whose every bad line the scan kept, so that
    a line is told to be a row without being parsed: not a kept bad line, and not blank (a row
    is a JSON object)."""
    source = open_source(path, options)
    if not isinstance(source, JsonlSource) or scan.error_count != len(scan.errors):
        return None
    bad = {error.line_no for error in scan.errors}
    return _wanted_rows(source, scan.valid, backend, bad, row_key, wanted)


def _wanted_rows(
    source: JsonlSource,
    rows: int,
    backend: str | None,
    bad: set[int],
    row_key: Callable[[int], str],
    wanted: Callable[[int], bool],
) -> Iterator[DatasetRow]:
    for index, line_no, record in source.wanted_records(backend, bad, rows, wanted):
        key = row_key(index)
        digest, _colon, occurrence = key.rpartition(":")
        if not isinstance(record, LineFields) or prompt_hash(record.prompt) != digest:
            raise DatasetError(f"{where(source, line_no)}: {CHANGED}; run again with --resume")
        yield DatasetRow.of(index, line_no, record, digest, int(occurrence))


def iter_units(rows: Iterator[DatasetRow], samples_per_prompt: int) -> Iterator[DatasetRow]:
    """Each row's units of work, prompt-major: samples 0..N-1 of the first prompt, then of the
    next. A unit is the row with its sample's key (`sample_key`), `sample_index` and position
    among the units (`index`: row index * N + sample); sample 0 is the row itself, so a run of
    one sample per prompt is the run it was before samples existed."""
    if samples_per_prompt == 1:  # each row is its sample 0 (a copy per row cost ~1/4 of the read)
        yield from rows
        return
    for row in rows:
        for key, index, sample in unit_keys(row.key, row.index, samples_per_prompt):
            yield replace(row, key=key, index=index, sample_index=sample)


def keyed_units(keys: RowKeys, samples_per_prompt: int) -> Iterator[tuple[str, int, int]]:
    """The (key, index, sample index) of each unit of work, as `iter_units` numbers them, from
    the keys a scan kept."""
    if samples_per_prompt == 1:  # each row is its sample 0 (a generator per row cost ~1/3)
        yield from ((key, row_index, 0) for row_index, key in enumerate(keys.iter_keys()))
        return
    for row_index, row_key in enumerate(keys.iter_keys()):
        yield from unit_keys(row_key, row_index, samples_per_prompt)


def unit_keys(row_key: str, row_index: int, samples_per_prompt: int) -> Iterator[tuple[str, int, int]]:
    """The (key, index, sample index) of each unit of a row (`iter_units`)."""
    for sample in range(samples_per_prompt):
        yield sample_key(row_key, sample), row_index * samples_per_prompt + sample, sample
